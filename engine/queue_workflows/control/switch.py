"""A worker's own view of its ON/OFF switch, shared by its main thread and its beat."""

from __future__ import annotations

import logging
import threading
from typing import Any

from queue_workflows.common.wake import WakeEvent

log = logging.getLogger(__name__)


class WorkerSwitch:
    """Parked workers do not claim; a hard OFF asks the worker to hand back its job and exit 79."""

    def __init__(self, host_label: str, queue: str) -> None:
        self.host_label = host_label
        self.queue = queue
        self.payload = f"{host_label}:{queue}"
        self.changed = WakeEvent()  # an idle worker blocks in its socket: this wakes it
        self._parked = False
        self._hard = False  # the row says OFF with policy hard: its stop was asked for already
        self._blocked: str | None = None
        self._lock = threading.Lock()

    @property
    def parked(self) -> bool:
        return self._parked or self._blocked is not None

    def block(self, reason: str) -> None:
        """Park for a reason of the worker's own (a device that does not answer) until unblocked."""
        if self._blocked != reason:
            log.error("worker %s parked: %s", self.payload, reason)
        self._blocked = reason

    def unblock(self) -> None:
        if self._blocked is not None:
            log.warning("worker %s: %s no longer holds; claiming again", self.payload, self._blocked)
            self._blocked = None
            self.changed.set()

    def apply(self, row: dict[str, Any] | None, *, at_start: bool = False) -> bool:
        """Take the row from worker_controls (None = ON); True when it asks for a hard stop now.

        At start, OFF of either policy parks. A hard OFF asks for its stop once, whether the worker
        was claiming or already parked (a park escalated to hard): a worker that comes back under
        the same hard OFF has been stopped already, so it stays parked.
        """
        off = row is not None and row["desired_state"] == "off"
        hard_off = off and row is not None and row["stop_policy"] == "hard"
        with self._lock:
            was, self._parked = self._parked, off
            hard = hard_off and not self._hard and not at_start
            self._hard = hard_off
        if was != off or hard:
            who = f" by {row['requested_by']}" if row and row.get("requested_by") else ""
            if off:
                log.warning("worker %s turned OFF%s (%s): not claiming until ON", self.payload, who, "hard stop" if hard else "parked")
            else:
                log.warning("worker %s turned ON%s: claiming again", self.payload, who)
            self.changed.set()
        return hard
