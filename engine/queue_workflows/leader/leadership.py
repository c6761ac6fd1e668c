"""Orchestrator leadership: any number of orchestrators run, exactly one leads, on a renewed lease.

The leader holds a lease in `qw_leadership`, its expiry on the server's clock, and renews it
every `leader_renew_seconds`; a standby, bidding every `poll_seconds`, takes the row once the
lease lapsed (the leader froze, was cut off or stopped) or the leader's lease connection is gone
(it died: a hint that hastens the takeover, never the source of truth). A new leader starts a
*term*: it bumps the epoch, and each transaction of its services begins with `Term.guard`, which
reads that epoch and an unexpired lease FOR KEY SHARE. The bump takes the row FOR UPDATE, so it
waits for the old leader's guarded transactions to end and makes its later ones fail: a leader
that has not yet noticed its loss cannot act beside its successor (migrations 0015, 0029).

A leader also times its lease on its own monotonic clock from before each renewal, so once it
could not renew in time (frozen, partitioned) its guard refuses work before asking the server;
it then stops its services and stands by again (`orchestrator.run` campaigns anew).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.common.health_stamp import HealthStamp
from queue_workflows.common.text import first_line
from queue_workflows.common.wake import WakeEvent, wait_any
from queue_workflows.errors import ConfigError

log = logging.getLogger(__name__)

_LEADERSHIP = sqlfile.load("queue_workflows.leader", "leadership.sql")

ServerClock = Callable[[], datetime | None]  # the server time leases are judged by; None: the server's own


def server_clock() -> None:
    return None


class LeadershipLost(Exception):
    """Another orchestrator leads now, or this one's lease lapsed: its services must stop."""


def default_orchestrator_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Term:
    """One leader's tenure; `ended` is set when it ends (stopped, lost or lapsed), and its services stop on it."""

    def __init__(
        self,
        epoch: int,
        *,
        lease_seconds: float,
        granted_at: float,
        now_fn: Callable[[], float] = time.monotonic,
        clock: ServerClock = server_clock,
    ) -> None:
        self.epoch = epoch
        self.lease_seconds = lease_seconds
        self.now_fn = now_fn
        self.clock = clock
        self.valid_until = granted_at + lease_seconds  # on now_fn's clock: the server's expiry is no earlier
        self.ended = WakeEvent()  # its leader's hold waits on it and on the stop signal at once

    def renewed(self, sent_at: float) -> None:
        """The server extended the lease by a statement sent at `sent_at` (now_fn's clock)."""
        self.valid_until = sent_at + self.lease_seconds

    def lapsed(self) -> bool:
        return self.now_fn() >= self.valid_until

    def guard(self, conn: db.Conn) -> None:
        """Call first inside a leader transaction: raises LeadershipLost unless this term still stands."""
        if self.ended.is_set():
            raise LeadershipLost(f"term {self.epoch} has ended")
        if self.lapsed():
            self.ended.set()
            raise LeadershipLost(f"term {self.epoch}: its lease lapsed before it was renewed")
        # A guarded transaction idle for a whole lease belongs to a leader that stopped.
        params = {"epoch": self.epoch, "idle_ms": str(max(1, int(self.lease_seconds * 1000))), "at": self.clock()}
        if conn.execute(_LEADERSHIP["leader_fence"], params).fetchone() is None:
            self.ended.set()
            raise LeadershipLost(f"term {self.epoch} was superseded by another leader, or its lease lapsed")


class Elector:
    """Stand by until the lease is ours, then renew it; one connection, beating our `qw_orchestrators` row."""

    def __init__(
        self,
        *,
        orchestrator_id: str | None = None,
        lease_seconds: float | None = None,
        renew_seconds: float | None = None,
        poll_seconds: float = 0.2,
        beat_seconds: float = 1.0,
        stale_seconds: float = 30.0,
        now_fn: Callable[[], float] = time.monotonic,
        clock: ServerClock = server_clock,
    ) -> None:
        settings = config.current().settings
        self.orchestrator_id = orchestrator_id or default_orchestrator_id()
        self.lease_seconds = lease_seconds or settings.leader_lease_seconds
        self.renew_seconds = renew_seconds or settings.leader_renew_seconds or self.lease_seconds / 3
        if not 0 < self.renew_seconds < self.lease_seconds:
            raise ConfigError(f"leader renewal every {self.renew_seconds:g}s must be shorter than the {self.lease_seconds:g}s lease")
        self.poll_seconds = poll_seconds
        self.beat_seconds = beat_seconds
        self.stale_seconds = stale_seconds
        self.now_fn = now_fn
        self.clock = clock
        self.term: Term | None = None
        self._conn: db.Conn | None = None
        self._next_beat = 0.0
        self.health = HealthStamp(settings.health_file)

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
        conn.execute(_LEADERSHIP["orchestrator_beat"], {
            "orchestrator_id": self.orchestrator_id, "hostname": socket.gethostname(),
            "host_label": config.current().settings.host_label, "pid": os.getpid(), "role": role, "epoch": epoch,
        })
        self._next_beat = self.now_fn() + self.beat_seconds
        self.health.touch(f"orchestrator {self.orchestrator_id} ({role}) beat")
        if role == "leader":
            for row in conn.execute(_LEADERSHIP["orchestrators_prune"], {"stale_seconds": self.stale_seconds}).fetchall():
                log.info("forgot orchestrator %s (silent for over %.0fs)", row["orchestrator_id"], self.stale_seconds)

    def bid(self, conn: db.Conn) -> Term | None:
        """One attempt to start a term: a Term when the lease was free and is now ours, else None."""
        if conn.execute(_LEADERSHIP["leader_seems_vacant"], {"at": self.clock()}).fetchone() is None:
            return None
        with conn.transaction():
            if conn.execute(_LEADERSHIP["leader_vacant"], {"at": self.clock()}).fetchone() is None:
                return None
            granted_at = self.now_fn()  # before the lease is stamped: our local view ends no later than the server's
            row = conn.execute(_LEADERSHIP["leader_new_term"], {
                "orchestrator_id": self.orchestrator_id, "lease_seconds": self.lease_seconds, "at": self.clock(),
            }).fetchone()
        assert row is not None  # the row is locked and exists (migration 0015)
        self.term = Term(int(row["epoch"]), lease_seconds=self.lease_seconds, granted_at=granted_at,
                         now_fn=self.now_fn, clock=self.clock)
        return self.term

    def campaign(self, stop: threading.Event) -> Term | None:
        """Block as a standby until this orchestrator leads (its new Term) or `stop` is set (None)."""
        announced = False
        while not stop.is_set():
            try:
                conn = self._connection()
                term = self.bid(conn)
                if term is not None:
                    self._beat(conn, "leader", term.epoch, force=True)
                    log.info("leading (term %d) as %s; lease %gs, renewed every %gs",
                             term.epoch, self.orchestrator_id, self.lease_seconds, self.renew_seconds)
                    return term
                self._beat(conn, "standby", None)
                if not announced:
                    leader = conn.execute(_LEADERSHIP["leader_epoch"]).fetchone()
                    log.info("standing by: %s leads (term %s)", leader and leader["leader_id"], leader and leader["epoch"])
                    announced = True
            except Exception as exc:  # noqa: BLE001 - a standby outlives any error
                if isinstance(exc, psycopg.Error):
                    log.warning("leader election: database unavailable (%s)", first_line(exc))
                else:
                    log.exception("leader election failed; retrying")
                self._drop()
            stop.wait(self.poll_seconds)
        return None

    def renew(self, term: Term) -> bool:
        """Extend the lease of `term`; False (and the term ended) when it was lost or had lapsed."""
        conn = self._conn
        if conn is None or conn.closed:  # the server records our lease connection: a new one is not it
            raise psycopg.OperationalError("leadership connection closed")
        sent_at = self.now_fn()
        if term.lapsed():
            log.error("term %d: lease lapsed before it could be renewed (frozen or cut off): stepping down", term.epoch)
        elif conn.execute(_LEADERSHIP["leader_renew"], {"epoch": term.epoch, "lease_seconds": self.lease_seconds, "at": self.clock()}).fetchone():
            term.renewed(sent_at)
            return True
        else:
            row = conn.execute(_LEADERSHIP["leader_epoch"]).fetchone()
            log.error("term %d lost (now term %s, led by %s): stepping down", term.epoch, row and row["epoch"], row and row["leader_id"])
        term.ended.set()
        return False

    def hold(self, term: Term, stop: threading.Event) -> None:
        """While leading: renew the lease every `renew_seconds`; return when stopped or the term is lost."""
        next_renewal = self.now_fn()
        while not stop.is_set() and not term.ended.is_set():
            try:
                if self.now_fn() >= next_renewal:
                    next_renewal = self.now_fn() + self.renew_seconds
                    if not self.renew(term):
                        break
                    self._beat(self._connection(), "leader", term.epoch)
            except Exception as exc:  # noqa: BLE001 - unsure we still lead: step down rather than risk two leaders
                log.error("leadership check failed (%s): stepping down from term %d", first_line(exc), term.epoch)
                term.ended.set()
                self._drop()  # our lease connection goes: a standby may take over at once
                break
            # Until the next renewal; a guard that found the term over, or a stop, wakes us sooner.
            wait_any((term.ended, stop), max(0.0, next_renewal - self.now_fn()))

    def resign(self) -> None:
        """Leave for good: the lease is released (a standby takes over at its next bid) and our row goes."""
        if self._conn is not None and not self._conn.closed:
            try:
                if self.term is not None:
                    self._conn.execute(_LEADERSHIP["leader_release"], {"epoch": self.term.epoch})
                self._conn.execute(_LEADERSHIP["orchestrator_gone"], {"orchestrator_id": self.orchestrator_id})
            except psycopg.Error:
                pass
        self._drop()


def orchestrators(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Every orchestrator that beat lately: id, host, pid, role (leader, standby, deposed, lapsed), epoch, silent_seconds."""
    with db.transaction(conn) as c:
        return list(c.execute(_LEADERSHIP["orchestrators_list"]).fetchall())
