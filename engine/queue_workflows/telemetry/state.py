"""What the sidecar's loop last saw, shared with the Prometheus scrapes under one lock."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from queue_workflows.telemetry.store import QueueFigures


@dataclass
class MetricsState:
    """What the loop last saw; written by the loop, read by scrapes, under one lock."""

    host_label: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    payload: dict[str, Any] | None = None
    queues: QueueFigures | None = None
    outcomes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    costs: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (family, queue, cost): what finished jobs cost
    database_up: bool = False
    publish_failures: int = 0
    known_queues: set[tuple[str, str]] = field(default_factory=set)  # (family, queue): shown as 0 once seen
    known_workers: set[tuple[str, str]] = field(default_factory=set)  # (host, queue)

    def update(self, **changes: Any) -> None:
        with self.lock:
            for key, value in changes.items():
                setattr(self, key, value)
            if self.queues is not None:
                self.known_queues.update((f, q) for f, q, _ in self.queues.jobs)
                self.known_workers.update(self.queues.live_workers)
