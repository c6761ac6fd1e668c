"""The engine's migrations up to a version, copied into a folder: a migration test applies them alone beside an open reader."""

from __future__ import annotations

import shutil
from pathlib import Path

from queue_workflows import db


def chain_to(version: int, into: Path) -> Path:
    """The migrations up to `version` alone: a later one may add a column, which waits for the reader by nature."""
    for migration in db.discover():
        if migration.version <= version:
            for path in (migration.up, migration.down):
                if path is not None:
                    shutil.copy(path, into)
    return into
