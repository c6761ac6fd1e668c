"""Tell a transaction-mode pooler (PgBouncer) from a session of our own, before anything relies on session state."""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from queue_workflows.errors import TransactionPoolerError

log = logging.getLogger(__name__)

EXIT_TRANSACTION_POOLER = 80
"""A worker, orchestrator or scheduler refused to start through a transaction-mode pooler (docs/poolers.md)."""

ROUNDS = 3
"""Looks taken: a pooler that happens to hand back the same server connection once is caught by the next."""

REFUSAL = (
    "{source} points at a transaction-mode pooler (the session did not keep one Postgres backend across transactions: "
    "backend {first} became {then}): connect workers, orchestrators and schedulers to Postgres directly "
    "or through a session-mode pool; producers, the dashboard and qw may stay on the pooler"
)

_known: dict[str, bool] = {}
_known_lock = threading.Lock()


def _backend(conn: psycopg.Connection[Any]) -> int:
    # Inline, as db.py's own statements are: sqlfile lives in common/, which imports db, which imports this.
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def shared_backend(url: str) -> tuple[int, int] | None:
    """(first backend, backend seen later) when two transactions of one connection ran on different backends, or
    another client's transaction ran on ours; None when the connection kept a backend of its own.

    Postgres gives each session one backend for its life, so the pid only moves under a pooler
    that hands server connections out per transaction. The second client asks while ours sits
    idle between transactions: a transaction pooler gives it our idle backend (or, having given it
    another, gives us a different one next), a session pool or Postgres itself never does.
    """
    with psycopg.connect(url, autocommit=True, prepare_threshold=None, connect_timeout=10) as ours:
        first = _backend(ours)
        for _ in range(ROUNDS):
            with psycopg.connect(url, autocommit=True, prepare_threshold=None, connect_timeout=10) as other:
                theirs = _backend(other)
            if theirs == first:
                return first, theirs
            again = _backend(ours)
            if again != first:
                return first, again
    return None


def is_transaction_pooled(url: str) -> bool:
    """Whether `url` goes through a transaction-mode pooler; looked at once per URL in a process."""
    with _known_lock:
        if url in _known:
            return _known[url]
    pooled = shared_backend(url) is not None
    with _known_lock:
        _known[url] = pooled
    if pooled:
        log.info("the database URL goes through a transaction-mode pooler: no server-side prepared statements on it")
    return pooled


def known_transaction_pooled(url: str) -> bool:
    """What `is_transaction_pooled` found for `url` already, without connecting (False when not yet looked)."""
    with _known_lock:
        return _known.get(url, False)


def require_session(url: str, *, source: str = "QW_DATABASE_URL") -> None:
    """Raise TransactionPoolerError (exit 80) unless `url` keeps one backend per connection, as session locks and LISTEN need."""
    moved = shared_backend(url)
    with _known_lock:
        _known[url] = moved is not None
    if moved is not None:
        raise TransactionPoolerError(REFUSAL.format(source=source, first=moved[0], then=moved[1]))
