"""Each worker process notes its worker id in a file named by its pid.

A health check in the same container (the same PID namespace and /tmp) then finds the worker's
own heartbeat row by id, even where replicas share a host label and a pid, which their start
times alone cannot always tell apart. A note also names the database the worker uses, so a check
on a host where workers of other databases run (`qw dev` in another terminal) looks at its own
database's workers only. Notes are best effort: without one, the check falls back to matching
pid and start time.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from psycopg import conninfo

log = logging.getLogger(__name__)

START_SLACK_SECONDS = 5.0
"""A note older than its process (minus this) was left by an earlier process with the same pid."""


class Note(NamedTuple):
    worker_id: str
    database: str
    """`database_key` of the worker's DSN; "" in a note written before notes named one."""


def database_key(url: str) -> str:
    """Where a DSN leads (host, port, database), without who connects or how: equal DSNs, equal keys."""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - a DSN libpq cannot parse leads nowhere we could compare
        return url
    return f"{parts.get('host') or ''}:{parts.get('port') or ''}/{parts.get('dbname') or ''}"


def notes_dir() -> Path:
    return Path(tempfile.gettempdir()) / "queue-workflows"


def _path(pid: int) -> Path:
    return notes_dir() / f"worker-{pid}.id"


def note(worker_id: str, database_url: str, pid: int | None = None) -> None:
    """Record `worker_id` (of `database_url`) as this process's (or `pid`'s); a failure is logged, never raised."""
    path = _path(os.getpid() if pid is None else pid)
    try:
        path.parent.mkdir(mode=0o1777, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{worker_id}\n{database_key(database_url)}\n")
        tmp.replace(path)
    except OSError as exc:
        log.debug("could not note worker id in %s: %s", path, exc)


def forget(pid: int | None = None) -> None:
    try:
        _path(os.getpid() if pid is None else pid).unlink(missing_ok=True)
    except OSError:
        pass


def read_note(pid: int, process_started: float) -> Note | None:
    """The note process `pid` (started at epoch `process_started`) left, if it did."""
    path = _path(pid)
    try:
        if path.stat().st_mtime < process_started - START_SLACK_SECONDS:
            return None
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if not lines or not lines[0].strip():
        return None
    return Note(lines[0].strip(), lines[1].strip() if len(lines) > 1 else "")


def read(pid: int, process_started: float) -> str | None:
    """The worker id process `pid` (started at epoch `process_started`) noted, if it did."""
    found = read_note(pid, process_started)
    return found.worker_id if found else None
