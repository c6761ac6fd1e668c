"""An idle worker, as enqueues see one: a connection holding queues' idle batons (migration 0051)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from queue_workflows.worker.idle_baton import BATON_NAMESPACE


@contextmanager
def worker_waiting(url: str, *queues: str) -> Iterator[psycopg.Connection]:
    """Hold each queue's idle baton on a connection of its own: enqueues on those queues NOTIFY while it lasts."""
    with psycopg.connect(url, autocommit=True) as conn:
        for queue in queues:
            taken = conn.execute("SELECT qw_take_idle_baton(%s, %s, 5000)", (BATON_NAMESPACE, queue)).fetchone()
            assert taken and taken[0], f"could not take the idle baton of {queue!r}"
        yield conn
