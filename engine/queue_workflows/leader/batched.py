"""A leader service that works in small batches: a step every `interval`, again after `pause` while a batch came full."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from queue_workflows import config, db
from queue_workflows.common.listening import run_listening

log = logging.getLogger(__name__)


class BatchedService:
    """One short transaction per step (`batch_once`: rows done, by query name), so a backlog takes a share of the server, not all of it."""

    what = "batches"  # names the service's thread loop in its logs
    done, prefix = "done", ""  # its log line's verb, and the query-name prefix the line leaves out
    log_level = logging.INFO

    def __init__(
        self,
        *,
        stop_event: threading.Event,
        guard: Callable[[db.Conn], None] | None = None,
        batch: int = 500,
        interval: float | None = None,
        pause: float = 0.1,
    ) -> None:
        self.stop_event = stop_event
        self.guard = guard
        self.batch = batch
        self.interval = interval or config.current().settings.retention_interval_seconds
        self.pause = pause
        self.total = 0

    def batch_once(self, conn: db.Conn) -> dict[str, int]:
        raise NotImplementedError

    def _step(self, conn: db.Conn) -> float:
        done = self.batch_once(conn)
        self.total += sum(done.values())
        if any(done.values()):
            log.log(self.log_level, "%s: %s %s", self.what, self.done,
                    ", ".join(f"{n} {name.removeprefix(self.prefix)}" for name, n in done.items() if n))
        return self.pause if any(n >= self.batch for n in done.values()) else self.interval

    def run_forever(self) -> None:
        run_listening(self.stop_event, what=self.what, channel=None, step=self._step, guard=self.guard)
