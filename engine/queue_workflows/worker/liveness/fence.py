"""The fence between a worker's trips and its main thread's store-and-claim commits.

The main thread holds it from the commit that stores a finished job's outcome (and claims the
next job) until the liveness beat knows what that commit left running; every trip takes it
before deciding what to write. A trip therefore sees either the job still running or the
commit's result, never the gap between them, so it cannot stop a job that already finished
or leave a freshly claimed one charged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

# How long a trip waits for a commit in flight (or for a finished job's outcome to reach one)
# before deciding anyway; the commit normally takes milliseconds.
COMMIT_WAIT_SECONDS = 5.0


class CommitFence:
    def __init__(self, wait_seconds: float = COMMIT_WAIT_SECONDS) -> None:
        self.wait_seconds = wait_seconds
        self._lock = threading.RLock()  # re-entrant: the main thread may trip while it holds it

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Held by the main thread across a commit and the beat's update of what runs after it."""
        with self._lock:
            yield

    @contextmanager
    def deciding(self, timeout: float) -> Iterator[bool]:
        """Held by a trip while it decides; yields False when a stuck commit kept it out past `timeout`."""
        acquired = self._lock.acquire(timeout=max(0.0, timeout))
        try:
            yield acquired
        finally:
            if acquired:
                self._lock.release()
