"""The scheduler's clock: the database's, so replicas' own clocks may be off by any amount.

`now()` reads `clock_timestamp()` from Postgres; every replica asks the same server, so they
agree on whether a slot is due, and none fires early because its host clock runs fast.
`sleep()` waits on a stop event (a SIGTERM ends it at once) for the time left to the next
slot as measured on that clock; a replica that wakes a little early just reads the clock
again and sleeps the rest.

For tests only, `QW_SCHEDULE_TIME_SCALE` (with `QW_SCHEDULE_TIME_ORIGIN`) makes the clock run
`scale` times faster than the database's from `origin`: at 60, an every-minute entry fires
every real second, and several processes sharing the origin share the compressed time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

from queue_workflows.settings import Settings


class Clock:
    """`now()` on the database clock (optionally compressed); `sleep(seconds)` returns True once stopped."""

    def __init__(
        self,
        read_now: Callable[[], datetime],
        stop: threading.Event,
        *,
        scale: float = 1.0,
        origin: datetime | None = None,
    ) -> None:
        if scale <= 0 or (scale != 1.0 and origin is None):
            raise ValueError("a scaled clock needs scale > 0 and an origin")
        self.read_now = read_now
        self.stop = stop
        self.scale = scale
        self.origin = origin

    @classmethod
    def from_settings(cls, read_now: Callable[[], datetime], stop: threading.Event, settings: Settings) -> Clock:
        return cls(read_now, stop, scale=settings.schedule_time_scale, origin=settings.schedule_time_origin)

    def now(self) -> datetime:
        real = self.read_now().astimezone(UTC)
        if self.origin is None or self.scale == 1.0:
            return real
        return self.origin + (real - self.origin) * self.scale

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds` of this clock's time; True when the stop event is (or gets) set."""
        return self.stop.wait(max(0.0, seconds) / self.scale)
