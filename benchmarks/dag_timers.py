"""Durable timers and events: how late a sleeping node wakes, and how fast an event reaches its waiting node.

Real processes: one orchestrator (its timekeeper sleeps until the earliest deadline and is
woken by NOTIFY for anything new).
- sleeps: one run of N sleep nodes whose `until` deadlines are spread over a few seconds; the
  lateness of each is its `finished_at` minus its `wake_at`, both on the database clock
  (p50/p99/max). Bound: p99 under 100 ms.
- events: a run whose wait_event node waits, then a plain INSERT of its event; from just before
  the INSERT to this process hearing the node's completion (the outbox NOTIFY on qw_dispatch).
  The baseline, measured in the same run and interleaved with it, is a bare NOTIFY round trip:
  a NOTIFY to a listening process that NOTIFYs back. An event is delivered by its insert
  trigger, in the sender's transaction, so its cost is that of a durable commit (also measured:
  an event no node waits for, whose commit flushes less WAL and so is a lower bound) plus the
  delivery. A second baseline is the same round trip sent by a transaction that writes a row,
  whose commit waits for its WAL flush as a durable event's does. Bound, on p50: a durable
  event within 2x the durable round trip (like for like: both pay one flush). Reported beside
  it: the bare round trip, which no durable write can match, and an event sent with
  synchronous_commit off (no WAL flush to wait for, which leaves the delivery).

    python benchmarks/dag_timers.py [--sleeps 300] [--events 100] [--quick]
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from typing import Any

import common
import psycopg
from common import Procs, median, percentile
from psycopg.rows import dict_row

from queue_workflows import testing

PING, PONG = "qw_bench_ping", "qw_bench_pong"


def echo(url: str) -> int:
    """The round trip's far end: answer every ping with a pong, woken as the timekeeper is (common.wake)."""
    from queue_workflows.common.wake import notifies

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {PING}")
        print("echo ready", flush=True)
        while True:
            for note in notifies(conn, 5.0):  # type: ignore[arg-type]
                conn.execute("SELECT pg_notify(%s, %s)", (PONG, note.payload))


class Bench:
    def __init__(self, url: str, procs: Procs) -> None:
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        self.listener = psycopg.connect(url, autocommit=True)
        self.listener.execute("LISTEN qw_dispatch")
        self.listener.execute(f"LISTEN {PONG}")
        self.listener.execute("CREATE TABLE IF NOT EXISTS bench_ping (i int)")  # a logged row: a commit that flushes WAL
        env = common.qw_env(url)
        self.orchestrator = procs.qw_orchestrator(env)
        self.echo = procs.spawn("echo", [sys.executable, __file__, "--echo", url], env)
        testing.wait_until(lambda: self.scalar("SELECT count(*) FROM qw_orchestrators") >= 1 and "echo ready" in procs.tail(self.echo),
                           timeout=60, what="orchestrator and echo ready")
        self.procs = procs

    def scalar(self, query: str, *params: Any) -> Any:
        row = self.conn.execute(query, params).fetchone()  # type: ignore[arg-type]
        return next(iter(row.values())) if row else None

    def sleeps(self, n: int, spread: float) -> list[float]:
        """Lateness (seconds) of n sleeps due 1 s from now and spread over `spread` seconds."""
        from queue_workflows import Workflow, start_run

        start = self.scalar("SELECT clock_timestamp()") + timedelta(seconds=1.0)
        wf = Workflow("sleeps")
        for i in range(n):
            wf.sleep(f"s{i}", until=(start + timedelta(seconds=spread * i / n)).isoformat())
        run_id = start_run(wf, {})
        testing.wait_until(lambda: self.scalar("SELECT status FROM workflow_runs WHERE id = %s", run_id) != "running",
                           timeout=spread + 60, interval=0.05, what="every sleep woke")
        self.procs.check_alive([self.orchestrator])
        rows = self.conn.execute("SELECT extract(epoch FROM finished_at - wake_at)::float AS late, status FROM workflow_node_jobs "
                                 "WHERE run_id = %s", (run_id,)).fetchall()
        assert len(rows) == n and all(r["status"] == "completed" for r in rows), "a sleep did not complete"
        return [r["late"] for r in rows]

    def _heard(self, channel: str, payload: str, timeout: float = 10.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for note in self.listener.notifies(timeout=max(0.0, deadline - time.monotonic()), stop_after=1):
                if note.channel == channel and note.payload == payload:
                    return time.perf_counter()
        raise TimeoutError(f"nothing on {channel} for {payload} within {timeout}s\n{self.procs.tail(self.orchestrator)}")

    def _drain(self) -> None:
        list(self.listener.notifies(timeout=0.0))

    def round_trip(self, i: int) -> float:
        self._drain()
        started = time.perf_counter()
        self.listener.execute("SELECT pg_notify(%s, %s)", (PING, str(i)))
        return self._heard(PONG, str(i)) - started

    def durable_round_trip(self, i: int) -> float:
        """The same round trip sent by a transaction that writes a row, so its commit waits for its WAL flush as an event's does."""
        self._drain()
        started = time.perf_counter()
        with self.listener.transaction():
            self.listener.execute("INSERT INTO bench_ping VALUES (%s)", (i,))
            self.listener.execute("SELECT pg_notify(%s, %s)", (PING, str(i)))
        return self._heard(PONG, str(i)) - started

    def durable_write(self, i: int) -> float:
        """An event no node waits for (kept): the INSERT and its commit alone, nothing to deliver."""
        started = time.perf_counter()
        self.scalar("INSERT INTO workflow_events (event_key, payload) VALUES (%s, '{}') RETURNING id", f"nobody-{i}")
        return time.perf_counter() - started

    def event(self, i: int, *, flush: bool = True) -> tuple[float, float]:
        """(seconds from the INSERT to hearing the node done, the same on the database clock).

        `flush=False` sends it with synchronous_commit off: the commit returns before its WAL is
        on disk, which leaves the delivery itself to compare with the bare round trip.
        """
        from queue_workflows import Workflow, start_run

        self.conn.execute("SET synchronous_commit = on" if flush else "SET synchronous_commit = off")
        run_id = start_run(Workflow("wait").wait_event("w", key=f"bench-{i}-{flush}"), {})
        testing.wait_until(lambda: self.scalar("SELECT status FROM workflow_node_jobs WHERE run_id = %s", run_id) == "waiting",
                           timeout=10, interval=0.002, what="the node waiting")
        time.sleep(0.02)  # let the timekeeper finish with the new waiter, so only the event is timed
        self._drain()
        started = time.perf_counter()
        event_id = self.scalar("INSERT INTO workflow_events (event_key, payload) VALUES (%s, %s) RETURNING id", f"bench-{i}-{flush}",
                               json.dumps({"i": i}))
        heard = self._heard("qw_dispatch", str(run_id)) - started
        self.conn.execute("SET synchronous_commit = on")
        db = self.scalar("SELECT extract(epoch FROM j.finished_at - e.created_at)::float FROM workflow_node_jobs j, workflow_events e "
                         "WHERE j.run_id = %s AND e.id = %s", run_id, event_id)
        return heard, db


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--echo":
        return echo(sys.argv[2])
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--sleeps", type=int, default=None, help="sleep nodes (default 300; 60 with --quick)")
    parser.add_argument("--events", type=int, default=None, help="events, and as many round trips (default 100; 20 with --quick)")
    args = parser.parse_args(argv)
    n_sleeps = args.sleeps or (60 if args.quick else 300)
    n_events = args.events or (20 if args.quick else 100)
    spread = 3.0 if args.quick else 10.0
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"DAG timers: {n_sleeps} sleeps spread over {spread:.0f}s, {n_events} events vs NOTIFY round trips", args, server_url)
        url = common.qw_database(server_url)
        try:
            bench = Bench(url, procs)
            late = bench.sleeps(n_sleeps, spread)
            trips, durable_trips, writes, events, events_db, unflushed = [], [], [], [], [], []
            for i in range(n_events):  # interleaved: all see the same machine at the same moment
                trips.append(bench.round_trip(i))
                durable_trips.append(bench.durable_round_trip(i))
                writes.append(bench.durable_write(i))
                heard, db = bench.event(i)
                events.append(heard)
                events_db.append(db)
                unflushed.append(bench.event(i, flush=False)[0])
            bench.conn.close()
            bench.listener.close()
        finally:
            procs.stop(procs.started)
            from queue_workflows import db as qw_db

            qw_db.close_pools()
            common.drop_database(server_url, url)
    ms = 1000.0
    common.print_table(["sleep lateness (wake_at -> completed, db clock)", "n", "p50 ms", "p99 ms", "max ms"],
                       [["sleep nodes", len(late), f"{median(late) * ms:.1f}", f"{percentile(late, 99) * ms:.1f}", f"{max(late) * ms:.1f}"]])
    print()
    common.print_table(["event delivery", "n", "p50 ms", "p99 ms", "vs round trip p50"], [
        ["bare NOTIFY round trip (baseline)", len(trips), f"{median(trips) * ms:.2f}", f"{percentile(trips, 99) * ms:.2f}", "1.00x"],
        ["NOTIFY round trip from a durable write (baseline 2)", len(durable_trips), f"{median(durable_trips) * ms:.2f}",
         f"{percentile(durable_trips, 99) * ms:.2f}", common.ratio(median(durable_trips), median(trips))],
        ["an event INSERT no node waits for (its commit alone)", len(writes), f"{median(writes) * ms:.2f}", f"{percentile(writes, 99) * ms:.2f}",
         common.ratio(median(writes), median(trips))],
        ["event INSERT -> node completed, heard", len(events), f"{median(events) * ms:.2f}", f"{percentile(events, 99) * ms:.2f}",
         common.ratio(median(events), median(trips))],
        ["  the same on the db clock (event row -> node row)", len(events_db), f"{median(events_db) * ms:.2f}",
         f"{percentile(events_db, 99) * ms:.2f}", "-"],
        ["  the same, sent with synchronous_commit off", len(unflushed), f"{median(unflushed) * ms:.2f}",
         f"{percentile(unflushed, 99) * ms:.2f}", common.ratio(median(unflushed), median(trips))],
    ])
    print("   (an event is delivered in its sender's transaction: a durable one costs its commit's WAL flush, as any write does)")
    print(f"   durable event vs the durable round trip: {common.ratio(median(events), median(durable_trips))}")
    failures = []
    if percentile(late, 99) >= 0.100:
        failures.append(f"sleep lateness p99 {percentile(late, 99) * ms:.1f} ms is not under 100 ms")
    if median(events) > 2 * median(durable_trips):
        failures.append(f"event p50 {median(events) * ms:.2f} ms is over 2x the round trip of a durable NOTIFY's {median(durable_trips) * ms:.2f} ms")
    for failure in failures:
        print(f"   FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
