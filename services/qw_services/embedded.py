"""An embedded Postgres (pgserver) for when no database is configured."""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger("queue_workflows.embedded")


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def forget_dead_handles(pgdata: Path) -> list[int]:
    """Drop the pids of dead `qw dev` runs from pgserver's list of users of this server.

    A run that died uncleanly stays on that list, and pgserver then never stops the server
    because it believes someone still uses it. Returns the pids dropped.
    """
    path = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(pids, list):
        return []
    alive = [pid for pid in pids if _alive(pid)]
    if len(alive) != len(pids):
        path.write_text(json.dumps(alive))
    return [pid for pid in pids if pid not in alive]


def start_embedded_postgres(data_dir: Path) -> tuple[str, Any]:
    """Start (or reuse) a server under `data_dir/pgdata`; returns its DSN and the handle keeping it up."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import pgserver
    except ImportError:
        raise SystemExit(
            "error: QW_DATABASE_URL is not set and the embedded Postgres is not installed; "
            "either set QW_DATABASE_URL or `pip install -e '.[embedded]'`"
        ) from None
    pgdata = (data_dir / "pgdata").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    if dropped := forget_dead_handles(pgdata):
        log.warning("an earlier qw dev (pid %s) did not stop cleanly; its claim on %s is dropped", ", ".join(map(str, dropped)), pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    url = server.get_uri()
    log.info("embedded Postgres at %s", pgdata)
    return url, server
