"""A migration test's starting points: a database at the version before the one under test, and the
migrations up to a version copied into a folder (applied alone beside an open reader)."""

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


def just_before(version: int, url: str) -> int:
    """Migrate the database at `url` to the version before `version` (up first, then down); that version."""
    before = max(m.version for m in db.discover() if m.version < version)
    db.bootstrap(url=url)
    db.downgrade(before, url=url)
    return before
