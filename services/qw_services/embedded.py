"""An embedded Postgres (pgserver) for when no database is configured."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

log = logging.getLogger("queue_workflows.embedded")


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
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    url = server.get_uri()
    log.info("embedded Postgres at %s", pgdata)
    return url, server
