"""Enqueue->start latency with one idle worker: queue_workflows vs pgqueuer vs procrastinate.

One worker process per system. Jobs are enqueued one at a time (each its own transaction),
waiting until each has finished, plus a short random gap (5-20 ms), before the next. Latency
is read from each system's own rows, database clock on both ends, so there is no clock skew:

  queue_workflows  ingest_jobs.started_at - created_at          (claim txn vs enqueue txn)
  procrastinate    procrastinate_events 'started'.at - 'deferred'.at
  pgqueuer         pgqueuer_log 'picked'.created - 'queued'.created

Floor on the same server: a raw LISTEN/NOTIFY ping-pong with a separate listener process that
answers each NOTIFY with its own NOTIFY (round trip, timed by this process alone).

A job's enqueue timestamp is its transaction's start, so it also counts the INSERT and the
commit's WAL flush, which the round trip does not pay. queue_workflows is therefore measured a
second time from each enqueue's COMMIT (`track_commit_timestamp`, turned on in the private
server), when its NOTIFY leaves: that row is the wake latency held against the round trip.

    python benchmarks/latency.py [--samples 200] [--quick] [--database-url DSN]
"""

from __future__ import annotations

import random
import sys
import time

import common
import psycopg
import systems
from common import Procs, percentile

from queue_workflows import testing

PONG_SCRIPT = """
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute("LISTEN bench_ping")
    print("ready", flush=True)
    while True:  # notifies() holds the connection lock: answer outside the generator
        notes = list(conn.notifies(stop_after=1))
        if any(n.payload == "stop" for n in notes):
            break
        for note in notes:
            conn.execute("SELECT pg_notify('bench_pong', %s)", (note.payload,))
"""


def gap() -> None:
    time.sleep(random.uniform(0.005, 0.020))


def notify_baseline(server_url: str, procs: Procs, samples: int) -> list[float]:
    """Round trips (s) of NOTIFY bench_ping -> listener process -> NOTIFY bench_pong -> us."""
    url = testing.create_database(server_url, "qwbench_notify")
    try:
        child = procs.spawn("notify-pong", [sys.executable, "-c", PONG_SCRIPT, url], common.child_env())
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("LISTEN bench_pong")
            testing.wait_until(lambda: "ready" in procs.tail(child), timeout=20, what="pong listener")
            time.sleep(0.2)
            rtts: list[float] = []
            for i in range(samples):
                t0 = time.perf_counter()
                conn.execute("SELECT pg_notify('bench_ping', %s)", (str(i),))
                got = next((n for n in conn.notifies(timeout=5) if n.payload == str(i)), None)
                if got is None:
                    raise TimeoutError(f"no pong for ping {i} within 5 s")
                rtts.append(time.perf_counter() - t0)
                gap()
            conn.execute("SELECT pg_notify('bench_ping', 'stop')")
        procs.stop([child])
        return rtts
    finally:
        common.drop_database(server_url, url)


def measure(system: systems.System, procs: Procs, samples: int, timeout: float,
            *, from_commit: bool = False) -> tuple[list[tuple[float, float]], str]:
    """Latencies from each job's enqueue timestamp, or (`from_commit`, queue_workflows) from its COMMIT."""
    started = systems.start_workers(system, procs, 1)
    ids: list[int] = []
    note = ""
    system.open()
    enqueue = system.enqueue_one_noting_commit if from_commit else system.enqueue_one  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + timeout
        for _ in range(samples):
            job_id = enqueue()
            ids.append(job_id)
            testing.wait_until(lambda: system.is_done(job_id), timeout=10, interval=0.002, what=f"{system.name} job {job_id}")
            if time.monotonic() > deadline:
                note = f"stopped after {len(ids)} samples ({timeout:.0f}s limit)"
                break
            gap()
    finally:
        system.close()
        procs.stop(started)
    rows = system.from_commit(ids) if from_commit else system.latencies(ids)  # type: ignore[attr-defined]
    if len(rows) != len(ids):
        note = (note + "; " if note else "") + f"{len(ids) - len(rows)} job(s) without timestamps"
    return rows, note


FROM_COMMIT = "queue_workflows from COMMIT"


def commit_pass(server_url: str, procs: Procs, samples: int, timeout: float) -> tuple[list[tuple[float, float]], str]:
    """queue_workflows again, timed from each enqueue's COMMIT; nothing when the server does not record commit times."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        if conn.execute("SHOW track_commit_timestamp").fetchone()[0] != "on":
            return [], "not measured: track_commit_timestamp is off on this server"
    system = systems.QueueWorkflows(server_url)
    try:
        system.setup()
        return measure(system, procs, samples, timeout, from_commit=True)
    finally:
        system.teardown()


def ms(v: float) -> str:
    return f"{v * 1000:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="jobs per system (default 200; 30 with --quick)")
    parser.add_argument("--systems", default=",".join(c.name for c in systems.ALL))
    args = parser.parse_args(argv)
    samples = args.samples or (30 if args.quick else 200)
    timeout = 8.0 if args.quick else 45.0
    classes = systems.select(args.systems)

    table: list[list[object]] = []
    qw_p50: float | None = None
    with common.postgres_server(args.database_url, commit_timestamps=True) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"latency: enqueue->start, one idle worker, {samples} sequential jobs", args, server_url)
        rtts = notify_baseline(server_url, procs, samples)
        base50, base99 = percentile(rtts, 50), percentile(rtts, 99)
        print(f"   LISTEN/NOTIFY ping-pong (client clock): p50 {ms(base50)} ms  p99 {ms(base99)} ms")
        results: list[tuple[str, list[tuple[float, float]], str]] = []
        for cls in classes:
            system = cls(server_url)
            try:
                system.setup()
                print(f"   {cls.name}: {system.describe()}", flush=True)
                rows, note = measure(system, procs, samples, timeout)
            except Exception as exc:  # noqa: BLE001 - say why and carry on
                lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
                rows, note = [], f"failed: {(lines[-1] if lines else type(exc).__name__)[:160]}"
            finally:
                system.teardown()
            results.append((cls.name, rows, note))
            if cls is systems.QueueWorkflows and rows:
                qw_p50 = percentile([s for s, _ in rows], 50)
                results.append((FROM_COMMIT, *commit_pass(server_url, procs, samples, timeout)))

    print()
    for name, rows, note in results:
        start = [s for s, _ in rows]
        finish = [f for _, f in rows]
        if not rows:
            table.append([name, 0, "-", "-", "-", "-", "-", "-", note])
            continue
        p50 = percentile(start, 50)
        vs = "baseline" if name == systems.QueueWorkflows.name else "-" if name == FROM_COMMIT else common.ratio(p50, qw_p50)
        table.append([
            name, len(rows), ms(p50), ms(percentile(start, 99)), ms(max(start)), ms(percentile(finish, 50)),
            common.ratio(p50, base50), vs, note,
        ])
    table.append(["LISTEN/NOTIFY round trip", len(rtts), ms(base50), ms(base99), ms(max(rtts)), "-", "1.00x", "-", "floor"])
    common.print_table(
        ["system", "n", "start p50 ms", "start p99 ms", "max ms", "finish p50 ms", "p50/notify-RTT", "p50 peer/qw", "note"], table
    )
    print("   start = the system's enqueue timestamp (its transaction's start) -> worker's claim (database clock);")
    print("   finish = enqueue -> terminal row. The from-COMMIT row times queue_workflows from the enqueue's commit")
    print("   (track_commit_timestamp): a NOTIFY leaves at the commit, so that is the row to hold against the round trip.")
    print("   p50 peer/qw > 1 means the peer takes longer than queue_workflows to start a job.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
