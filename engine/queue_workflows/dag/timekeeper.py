"""The orchestrator's timekeeper: fires due sleeps and event-wait timeouts, and hands events to their waiters.

Leader-only, on one connection LISTENing on `qw_timer` (a new event, a new deadline, a new
waiter: migration 0038's triggers). Each step is one guarded transaction: match events to
waiting nodes (`events.process_events`), complete due sleeps and time out due waits
(`timer_fire_due`), each node's status change writing its outbox event (the 0013 trigger) so the
dependants follow. Then it sleeps until the earliest `wake_at` still ahead (asked of the
server's clock, so hosts' clocks do not matter), at most `tick`. The deadlines are rows: a
timekeeper that starts after a crash, or after everything was down, fires what is overdue at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.common.listening import run_listening
from queue_workflows.dag import events

_TIMERS = sqlfile.load("queue_workflows.dag", "timers.sql")


class Pacer:
    """How long to wait: until the earliest deadline the last step saw, never past `tick`, at once when overdue.

    The deadline is noted relative to `now_fn` when the step saw it, so the time the step's own
    work took (and any early wake-up) is not waited twice.
    """

    def __init__(self, tick: float, *, now_fn: Callable[[], float] = time.monotonic) -> None:
        self.tick = tick
        self.now_fn = now_fn
        self._at: float | None = None

    def note(self, due_in: float | None) -> None:
        """The earliest deadline is `due_in` seconds from now (negative: overdue), or there is none."""
        self._at = None if due_in is None else self.now_fn() + due_in

    def wait(self) -> float:
        if self._at is None:
            return self.tick
        return max(0.0, min(self.tick, self._at - self.now_fn()))


def fire_due(conn: db.Conn, *, limit: int = 500) -> tuple[int, float | None]:
    """Complete due sleeps and time out due event waits, in the caller's transaction.

    Returns how many fired, and the seconds (by the server's clock) until the next deadline:
    negative when one is overdue, None when none waits.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_TIMERS["timer_fire_due"], {"limit": limit}).fetchone()
    return int(row["fired"]), row["due_in"]  # type: ignore[index]


class Timekeeper:
    def __init__(
        self,
        *,
        stop_event: threading.Event | None = None,
        tick: float = 30.0,  # a safety poll only: NOTIFY wakes it for anything new
        batch_size: int = 500,
        guard: Callable[[db.Conn], None] | None = None,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stop_event = stop_event or threading.Event()
        self.batch_size = batch_size
        self.guard = guard  # the leader's Term.guard: only the leader fires timers
        self.pacer = Pacer(tick, now_fn=now_fn)
        self.fired = 0

    def once(self, conn: db.Conn) -> bool:
        """Events, then due deadlines; True when a batch came full (more is due now)."""
        more = events.process_events(conn, limit=self.batch_size)
        fired, due_in = fire_due(conn, limit=self.batch_size)
        self.fired += fired
        self.pacer.note(due_in)
        return more or fired >= self.batch_size

    def run_forever(self, stop_event: threading.Event | None = None) -> None:
        """Until stopped: woken by LISTEN qw_timer, and at the earliest deadline; rides out outages."""
        run_listening(stop_event or self.stop_event, what="timekeeper", channel=events.CHANNEL, step=self._step, guard=self.guard)

    def _step(self, conn: db.Conn) -> float:
        if self.guard is None:  # the guard's transaction holds the step's otherwise
            with conn.transaction():
                more = self.once(conn)
        else:
            more = self.once(conn)
        return 0.0 if more else self.pacer.wait()
