"""Each worker process notes its worker id in a file named by its pid.

A health check in the same container (the same PID namespace and /tmp) then finds the worker's
own heartbeat row by id, even where replicas share a host label and a pid, which their start
times alone cannot always tell apart. Notes are best effort: without one, the check falls back
to matching pid and start time.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

START_SLACK_SECONDS = 5.0
"""A note older than its process (minus this) was left by an earlier process with the same pid."""


def notes_dir() -> Path:
    return Path(tempfile.gettempdir()) / "queue-workflows"


def _path(pid: int) -> Path:
    return notes_dir() / f"worker-{pid}.id"


def note(worker_id: str, pid: int | None = None) -> None:
    """Record `worker_id` as this process's (or `pid`'s); a failure is logged, never raised."""
    path = _path(os.getpid() if pid is None else pid)
    try:
        path.parent.mkdir(mode=0o1777, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(worker_id + "\n")
        tmp.replace(path)
    except OSError as exc:
        log.debug("could not note worker id in %s: %s", path, exc)


def forget(pid: int | None = None) -> None:
    try:
        _path(os.getpid() if pid is None else pid).unlink(missing_ok=True)
    except OSError:
        pass


def read(pid: int, process_started: float) -> str | None:
    """The worker id process `pid` (started at epoch `process_started`) noted, if it did."""
    path = _path(pid)
    try:
        if path.stat().st_mtime < process_started - START_SLACK_SECONDS:
            return None
        return path.read_text().strip() or None
    except OSError:
        return None
