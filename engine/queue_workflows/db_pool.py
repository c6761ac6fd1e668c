"""The process's connection pool, retrying a lost server every half second so producers follow a restart or failover at once."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

try:  # a private class of psycopg_pool: a release without it keeps the stock back-off rather than failing
    from psycopg_pool.base import AttemptWithBackoff
except ImportError:  # pragma: no cover - depends on the installed psycopg_pool
    AttemptWithBackoff = None  # type: ignore[assignment,misc]

RECONNECT_EVERY_SECONDS = 0.5
"""How often the pool retries a server it lost: a connect attempt is cheap, a producer kept waiting is not."""


class _SteadyAttempt(AttemptWithBackoff or object):  # type: ignore[misc]
    """psycopg_pool's reconnect attempt without its doubling (1, 2, 4, 8 s ...): a server back after 7 s would wait until 15 s."""

    INITIAL_DELAY = RECONNECT_EVERY_SECONDS
    DELAY_BACKOFF = 1.0


class FollowingPool(ConnectionPool[Any]):
    """A ConnectionPool whose reconnects retry every RECONNECT_EVERY_SECONDS until `reconnect_timeout`.

    Workers reconnect on their own connections at once; the pool's growing back-off had enqueues
    through it reach a promoted standby ~5 s after them (docs/ha.md).
    """

    def _add_connection(self, attempt: Any = None, *args: Any, **kwargs: Any) -> None:
        # Arguments beyond the attempt pass through untouched, so a psycopg_pool that adds one still works.
        if attempt is None and AttemptWithBackoff is not None:
            attempt = _SteadyAttempt(timeout=self.reconnect_timeout)
        super()._add_connection(attempt, *args, **kwargs)
