"""The liveness beat's own validated configuration, built from the worker's settings in one place."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queue_workflows.errors import ConfigError
from queue_workflows.settings import lease_margin_seconds
from queue_workflows.worker.exits import exit_now

_SECONDS = ("lease_seconds", "renew_seconds", "heartbeat_seconds", "check_seconds", "memory_check_seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class BeatConfig:
    """Who the beat speaks for and its timings; `now_fn` and `exit_fn` are injectable for tests."""

    worker_id: str
    host_label: str
    queue: str
    lease_seconds: float
    renew_seconds: float  # renew this often: shorter than the lease, or every lease lapses first
    heartbeat_seconds: float
    check_seconds: float = 0.25  # the beat's longest sleep
    max_trips: int = 3  # watchdog trips before a job fails instead of going back
    memory_check_seconds: float = 5.0
    # A gpu worker that admits by VRAM (affinity routing) checks each claim against what is free on
    # its devices; a throttle on how full a device is would only hold a packed device's workers back.
    gpu_memory_throttle: bool = True
    now_fn: Callable[[], float] = time.monotonic
    exit_fn: Callable[[int, str], None] = exit_now

    def __post_init__(self) -> None:
        for name in ("worker_id", "host_label", "queue"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"liveness beat: {name} must be a non-empty string, not {getattr(self, name)!r}")
        for name in _SECONDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"liveness beat: {name} must be a positive number of seconds, not {value!r}")
        if self.renew_seconds >= self.lease_seconds:
            raise ConfigError(f"liveness beat: renew_seconds ({self.renew_seconds:g}) must be shorter than lease_seconds ({self.lease_seconds:g})")
        if isinstance(self.max_trips, bool) or not isinstance(self.max_trips, int) or self.max_trips < 1:
            raise ConfigError(f"liveness beat: max_trips must be a positive integer, not {self.max_trips!r}")

    @property
    def lease_margin(self) -> float:
        """Give up on a lease this long before it would lapse, so nobody else can hold it yet."""
        return lease_margin_seconds(self.lease_seconds, self.renew_seconds)

    @classmethod
    def from_settings(cls, settings: Any, *, worker_id: str, queue: str) -> BeatConfig:
        """The beat of a worker on `queue` under `settings` (QW_LEASE_SECONDS, QW_LEASE_RENEW_SECONDS, ...)."""
        return cls(
            worker_id=worker_id,
            host_label=settings.host_label,
            queue=queue,
            lease_seconds=settings.lease_seconds,
            renew_seconds=settings.lease_renew_seconds,
            heartbeat_seconds=settings.heartbeat_seconds,
            max_trips=settings.watchdog_max_trips,
            memory_check_seconds=settings.memory_check_seconds,
            gpu_memory_throttle=settings.gpu_routing == "fifo",
        )
