"""The orchestrator's side of the transactional outbox: drain `workflow_dispatch_events`.

Workers never fan out. A node's terminal status and its event row are committed together (a
trigger on `workflow_node_jobs`, migration 0013, writes the row and NOTIFYs `qw_dispatch` in the
writer's transaction, whatever path made the node terminal). This drain takes a batch of due
events (`FOR UPDATE SKIP LOCKED`), advances each of their runs once (enqueue ready dependants,
skip markers, finish or fail the run, cancel not-started siblings) and marks the events
processed, all in one transaction: a crash anywhere leaves the events pending and the next drain
redoes the work, which `dispatcher.advance` and the unique (run_id, node_name) make idempotent.

A run whose fan-out raises is rolled back to a savepoint; its events are retried after an
exponential backoff, and after `dispatch_max_attempts` they and the run are poison-flagged
(`poisoned_at`, the error on the run) and left for an operator.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.common.listening import run_listening
from queue_workflows.dag import store
from queue_workflows.payloads import clean_text

_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")

log = logging.getLogger(__name__)

CHANNEL = "qw_dispatch"


class DispatchDrain:
    def __init__(
        self,
        *,
        stop_event: threading.Event | None = None,
        batch_size: int = 200,
        max_attempts: int | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 60.0,
        tick: float = 5.0,  # a safety poll only: NOTIFY wakes it, and a reconnect steps at once
        advance: Callable[[db.Conn, int, list[str] | None], Any] = store.advance_run,
        guard: Callable[[db.Conn], None] | None = None,
    ) -> None:
        self.stop_event = stop_event or threading.Event()
        self.batch_size = batch_size
        self.max_attempts = max_attempts or config.current().settings.dispatch_max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.tick = tick
        self.advance = advance
        self.guard = guard  # the leader's Term.guard: only the leader drains
        self.processed = 0

    def drain_once(self, conn: db.Conn) -> int:
        """One batch, one transaction; returns how many events it took (done or rescheduled)."""
        with conn.transaction():
            events = conn.execute(_DAG["dag_pending_events"], {"limit": self.batch_size}).fetchall()
            by_run: dict[int, list[dict[str, Any]]] = {}
            for event in events:
                by_run.setdefault(event["run_id"], []).append(event)
            done: list[int] = []
            for run_id, run_events in by_run.items():
                try:
                    # Completions only: just their dependants are read; a failure or cancel reads the run.
                    completed = [e["node_name"] for e in run_events] if all(e["kind"] == "completed" for e in run_events) else None
                    with conn.transaction():  # a savepoint: one run's failure does not undo the others
                        self.advance(conn, run_id, completed)
                    done.extend(e["id"] for e in run_events)
                except psycopg.OperationalError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a failing fan-out is retried, then poison-flagged
                    self._failed(conn, run_id, run_events, exc)
            if done:
                conn.execute(_DAG["dag_events_done"], {"ids": done})
        self.processed += len(done)
        return len(events)

    def _failed(self, conn: db.Conn, run_id: int, events: list[dict[str, Any]], exc: Exception) -> None:
        attempts = max(e["attempts"] for e in events) + 1
        delay = min(self.backoff_max, self.backoff_base * 2 ** (attempts - 1))
        error = clean_text(f"{type(exc).__name__}: {exc}")[:2000]
        params = {"ids": [e["id"] for e in events], "error": error, "delay_seconds": delay, "max_attempts": self.max_attempts}
        poisoned = conn.execute(_DAG["dag_events_failed"], params).fetchall()
        if poisoned:
            log.error("run %s: dispatch POISONED after %d attempts: %s", run_id, attempts, error)
        else:
            log.warning("run %s: dispatch failed (attempt %d/%d, retry in %.1fs): %s", run_id, attempts, self.max_attempts, delay, error)

    def _step(self, conn: db.Conn) -> float:
        """One batch; then how long to wait: none while batches come full, else until the next retry is due."""
        if self.drain_once(conn) >= self.batch_size:
            return 0.0
        row = conn.execute(_DAG["dag_next_event_due"]).fetchone()
        due = row["due_in"] if row else None
        return self.tick if due is None else max(0.0, min(self.tick, due))

    def run_forever(self, stop_event: threading.Event | None = None) -> None:
        """Drain until stopped: woken by LISTEN qw_dispatch, with a `tick` safety poll; rides out outages."""
        run_listening(stop_event or self.stop_event, what="dispatch drain", channel=CHANNEL, step=self._step, guard=self.guard)
