"""Exponential backoff with jitter; pure, so tests drive it with a fixed random source."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.1
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.2
    random_fn: Callable[[], float] = random.random
    attempt: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum or self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"invalid backoff: {self!r}")

    def next_delay(self) -> float:
        """The delay before the next try; grows by `factor` up to `maximum`, +/- `jitter`."""
        try:
            base = min(self.maximum, self.initial * self.factor**self.attempt)
        except OverflowError:  # a long outage: the cap has long been reached
            base = self.maximum
        self.attempt += 1
        spread = base * self.jitter * (2 * self.random_fn() - 1)
        return max(0.0, min(self.maximum, base + spread))

    def reset(self) -> None:
        self.attempt = 0


def retry_delay(attempt: int, *, base: float, cap: float, jitter: float = 0.2, random_fn: Callable[[], float] = random.random) -> float:
    """Delay before retrying after failed attempt number `attempt` (1-based): base * 2**(attempt-1), capped, jittered."""
    backoff = Backoff(initial=base, maximum=cap, jitter=jitter, random_fn=random_fn)
    backoff.attempt = max(0, attempt - 1)
    return backoff.next_delay()
