"""The loop the orchestrator's services share (reclaim sweep, dispatch drain, DAG keeper).

A connection of its own, LISTENing on one channel when the service is woken by one; a step of
work, in a transaction that starts with the leader's guard when one is given; a wait for a
NOTIFY or a timeout; and, whatever goes wrong, a fresh connection after a backoff, so the
service outlives database outages and its own bugs alike.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

from queue_workflows import config, db
from queue_workflows.common.backoff import Backoff
from queue_workflows.common.text import first_line
from queue_workflows.common.wake import notifies as wake_notifies

log = logging.getLogger(__name__)


def run_listening(
    stop: threading.Event,
    *,
    what: str,
    channel: str | None,
    step: Callable[[db.Conn], float],
    guard: Callable[[db.Conn], None] | None = None,
    quiet: Callable[[db.Conn], float | None] | None = None,
) -> None:
    """Until `stop`: `step(conn)` does one round and returns how long to wait for `channel` (0: at once).

    With `guard` (a leader's `Term.guard`), each step runs in one transaction that calls it first.
    `quiet(conn)`, asked first, may answer a wait instead: nothing to do, so no step (nor its guard).
    """
    url = config.current().database_url()
    backoff = Backoff(initial=0.2, maximum=5.0)
    conn: db.Conn | None = None
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = db.connect(autocommit=True, url=url)
                if channel is not None:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            idle = quiet(conn) if quiet is not None else None
            if idle is not None:
                wait = idle
            elif guard is None:
                wait = step(conn)
            else:
                with conn.transaction():
                    guard(conn)
                    wait = step(conn)
            backoff.reset()
            if wait > 0 and channel is None:
                stop.wait(wait)
            elif wait > 0:
                wake_notifies(conn, wait, wake=(stop,))  # in the socket: psycopg's own wait wakes every 0.1 s
        except Exception as exc:  # noqa: BLE001 - the service outlives any error
            if conn is not None:
                conn.close()
            conn = None
            if stop.is_set():
                break  # stopping (or a leader's term ended) mid-step: nothing to retry
            delay = backoff.next_delay()
            if isinstance(exc, psycopg.OperationalError):
                log.warning("%s: database unavailable (%s); retrying in %.2fs", what, first_line(exc), delay)
            else:
                log.exception("%s failed; retrying in %.2fs", what, delay)
            stop.wait(delay)
    if conn is not None:
        conn.close()
