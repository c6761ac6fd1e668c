"""Orchestrator leadership: any number of orchestrators run, exactly one leads.

The leader holds a session advisory lock on a connection of its own, so its death (or the loss
of that connection) frees the lock at once and a standby, polling every `poll_seconds`, takes
it. A new leader starts a *term*: it bumps the epoch in `qw_leadership`, and each transaction
of its services begins with `Term.guard`, which reads that epoch FOR SHARE. The bump waits for
the old leader's guarded transactions to end and makes its later ones fail, so a leader that
has not yet noticed its loss cannot act beside its successor (migration 0015).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import psycopg

from . import config, db
from .queries import parse_named_queries
from .session import first_line

log = logging.getLogger(__name__)

LOCK_NAMESPACE = 20824  # beside jobstore.WORKER_LOCK_NAMESPACE (20823)
GUARD_IDLE_MS = 10_000  # a leader transaction idle this long is ended by the server


class LeadershipLost(Exception):
    """Another orchestrator leads now: this one's services must stop."""


@cache
def _queries() -> dict[str, str]:
    return parse_named_queries(resources.files("queue_workflows.sql").joinpath("leadership.sql").read_text())


def q(name: str) -> str:
    return _queries()[name]


def default_orchestrator_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Term:
    """One leader's tenure; `ended` is set when it ends (stopped or lost), and its services stop on it."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.ended = threading.Event()

    def guard(self, conn: db.Conn) -> None:
        """Call first inside a leader transaction: raises LeadershipLost unless this term still stands."""
        if self.ended.is_set():
            raise LeadershipLost(f"term {self.epoch} has ended")
        row = conn.execute(q("leader_fence"), {"epoch": self.epoch, "idle_ms": str(GUARD_IDLE_MS)}).fetchone()
        if row is None:
            self.ended.set()
            raise LeadershipLost(f"term {self.epoch} was superseded by another leader")


class Elector:
    """Stand by until the lock is ours, then hold it; one connection, beating our `qw_orchestrators` row."""

    def __init__(
        self,
        *,
        orchestrator_id: str | None = None,
        poll_seconds: float = 0.2,
        beat_seconds: float = 1.0,
        stale_seconds: float = 30.0,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.orchestrator_id = orchestrator_id or default_orchestrator_id()
        self.poll_seconds = poll_seconds
        self.beat_seconds = beat_seconds
        self.stale_seconds = stale_seconds
        self.now_fn = now_fn
        self._conn: db.Conn | None = None
        self._next_beat = 0.0

    def _connection(self) -> db.Conn:
        if self._conn is None or self._conn.closed:
            self._conn = db.connect(autocommit=True, url=config.current().database_url())
            # Let the server notice a vanished leader host in seconds, not at the kernel's default hours.
            for name, value in (("tcp_keepalives_idle", "5"), ("tcp_keepalives_interval", "2"), ("tcp_keepalives_count", "3")):
                self._conn.execute("SELECT set_config(%s, %s, false)", (name, value))
            self._next_beat = 0.0
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _beat(self, conn: db.Conn, role: str, epoch: int | None, *, force: bool = False) -> None:
        if not force and self.now_fn() < self._next_beat:
            return
        conn.execute(q("orchestrator_beat"), {
            "orchestrator_id": self.orchestrator_id, "hostname": socket.gethostname(),
            "host_label": config.current().settings.host_label, "pid": os.getpid(), "role": role, "epoch": epoch,
        })
        self._next_beat = self.now_fn() + self.beat_seconds
        if role == "leader":
            for row in conn.execute(q("orchestrators_prune"), {"stale_seconds": self.stale_seconds}).fetchall():
                log.info("forgot orchestrator %s (silent for over %.0fs)", row["orchestrator_id"], self.stale_seconds)

    def campaign(self, stop: threading.Event) -> Term | None:
        """Block as a standby until this orchestrator leads (its new Term) or `stop` is set (None)."""
        announced = False
        while not stop.is_set():
            try:
                conn = self._connection()
                if conn.execute(q("leader_try_lock"), {"namespace": LOCK_NAMESPACE}).fetchone()["acquired"]:  # type: ignore[index]
                    epoch = int(conn.execute(q("leader_new_term"), {"orchestrator_id": self.orchestrator_id}).fetchone()["epoch"])  # type: ignore[index]
                    self._beat(conn, "leader", epoch, force=True)
                    log.info("leading (term %d) as %s", epoch, self.orchestrator_id)
                    return Term(epoch)
                self._beat(conn, "standby", None)
                if not announced:
                    leader = conn.execute(q("leader_epoch")).fetchone()
                    log.info("standing by: %s leads (term %s)", leader and leader["leader_id"], leader and leader["epoch"])
                    announced = True
            except Exception as exc:  # noqa: BLE001 - a standby outlives any error
                if isinstance(exc, psycopg.Error):
                    log.warning("leader election: database unavailable (%s)", first_line(exc))
                else:
                    log.exception("leader election failed; retrying")
                self._drop()  # a lock we may have taken goes with the connection
            stop.wait(self.poll_seconds)
        return None

    def hold(self, term: Term, stop: threading.Event) -> None:
        """While leading: check the lock's connection and the epoch; return when stopped or the term is lost."""
        while not stop.is_set() and not term.ended.is_set():
            try:
                conn = self._conn
                if conn is None or conn.closed:  # a new connection would not hold the lock
                    raise psycopg.OperationalError("leadership connection closed")
                row = conn.execute(q("leader_epoch")).fetchone()
                if row is None or row["epoch"] != term.epoch:
                    log.error("term %d superseded (now %s, led by %s): stepping down",
                              term.epoch, row and row["epoch"], row and row["leader_id"])
                    term.ended.set()
                    break
                self._beat(conn, "leader", term.epoch)
            except Exception as exc:  # noqa: BLE001 - unsure we still lead: step down rather than risk two leaders
                log.error("leadership check failed (%s): stepping down from term %d", first_line(exc), term.epoch)
                term.ended.set()
                self._drop()  # the lock goes with the connection; campaign again on a new one
                break
            stop.wait(self.poll_seconds)

    def resign(self) -> None:
        """Leave for good: our row goes, and closing the connection frees the lock for a standby now."""
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute(q("orchestrator_gone"), {"orchestrator_id": self.orchestrator_id})
            except psycopg.Error:
                pass
        self._drop()


def orchestrators(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Every orchestrator that beat lately: id, host, pid, role, epoch, silent_seconds."""
    with db.transaction(conn) as c:
        return list(c.execute(q("orchestrators_list")).fetchall())
