"""A service's health stamp: a file it rewrites after each beat that reached the database.

A container HEALTHCHECK then only compares the file's age with a limit (docker/qw-healthy, a
few milliseconds of one shell) instead of starting Python and querying Postgres every few
seconds, which cost 0.6 s of CPU per check and timed out under load. The stamp means what the
old check meant: this very process wrote its beat to the database within the limit.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class HealthStamp:
    """Rewrites `path` (when set) with one line saying what beat; never raises."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path else None
        self._warned = False

    def touch(self, what: str) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(what.replace("\n", " ")[:200] + "\n")
            tmp.replace(self.path)  # atomic: a check never reads half a line
        except OSError as exc:
            if not self._warned:
                log.warning("health stamp %s not written (%s): this container's HEALTHCHECK will fail", self.path, exc)
                self._warned = True

    @classmethod
    def from_settings(cls) -> HealthStamp:
        from queue_workflows import config

        return cls(config.current().settings.health_file)
