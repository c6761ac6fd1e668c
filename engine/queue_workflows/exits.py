"""The worker's exit codes, and the one way a worker leaves in the middle of a job.

A job's code is never interrupted: when the worker must stop running it, the process ends,
which frees its memory (and VRAM) and drops its connections, so the cluster sees it gone.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_BUDGET = 75
EXIT_STALLED = 76
EXIT_JOB_TAKEN = 77
EXIT_DEVICE_ERROR = 78
EXIT_HARD_STOP = 79


def exit_now(code: int, reason: str) -> None:
    """Log `reason`, flush, and end the process with `code` at once (no cleanup that could block)."""
    log.critical("exiting with code %d: %s", code, reason)
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass
    sys.stderr.flush()
    os._exit(code)
