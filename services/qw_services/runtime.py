"""What every service process does first: name itself in the logs and log to stderr.

Loading the app, reading its configuration, signals and one-line errors live in the engine's
`queue_workflows.app_loader`, shared with `claim_worker.main()` and the orchestrator.
"""

from __future__ import annotations

import logging
import multiprocessing
import os

from queue_workflows.app_loader import ensure_logging, on_stop_signals

__all__ = ["on_stop_signals", "setup_logging"]


def setup_logging(role: str) -> None:
    """Log to stderr at QW_LOG_LEVEL (default INFO), each line naming this process's role."""
    level = os.environ.get("QW_LOG_LEVEL", "INFO").upper()
    ensure_logging(level if level in logging.getLevelNamesMapping() else "INFO")
    multiprocessing.current_process().name = role
