"""The faults of the failure matrix: how each is injected into the running cluster, and what its recovery time measures.

Every trial returns its recovery in seconds on the database's clock (None where nothing has
to recover), or raises FaultBroken when the engine did something the contract forbids (a
thawed or cut-off worker that did not stop with exit 77, a late result that was stored).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from failure_cluster import WORKER_LOCKS, Cluster, faketime_lib

from queue_workflows import testing

EXIT_JOB_TAKEN = 77
HOLD = 600.0  # a probe's first run outlasts any trial: only the fault ends it


class FaultBroken(AssertionError):
    """The engine broke a contract during a fault; the matrix stops and says which."""


@dataclass(frozen=True)
class Fault:
    name: str
    what: str  # how it is injected, for the doc
    measures: str  # what its recovery time is, precisely
    trial: Callable[[Cluster], float | None]
    needs: str | None = None  # a key of Cluster.skips: the row is skipped, with its reason, where that is set
    sees: tuple[str, ...] = field(default=())  # regexes of the log lines an operator sees, first match of each kept
    status: bool = False  # also keep a `qw status` line from the first trial


def _dephase() -> None:
    time.sleep(random.uniform(0.0, 0.5))  # so faults do not phase-lock to the leader's 0.25 s sweep


def _expect_exit(proc, code: int, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """The worker's exit code must be `code`; one still running is killed (so the matrix goes on) and the fault reported broken."""
    try:
        got = proc.wait(timeout=timeout)
    except Exception as exc:
        proc.kill()
        proc.wait()
        raise FaultBroken(f"{what}: the worker was still running {timeout:g}s later (killed)") from exc
    if got != code:
        raise FaultBroken(f"{what}: the worker exited {got}, not {code}")


def kill_worker(c: Cluster) -> float:
    target = c.seat()
    job = c.run_probe(target, hold=HOLD)
    c.unpark()
    _dephase()
    since = c.db_now()
    target.kill()
    took = c.taken_over(job, target, since, timeout=4 * c.lease + 10)
    target.wait()
    c.wait_done(job)
    return took


def kill_leader(c: Cluster) -> float:
    from failure_load import DAG

    from queue_workflows import start_run

    pid = c.leader_pid()
    leader = next(p for p in c.orchestrators if p.pid == pid)
    _dephase()
    since = c.db_now()
    leader.kill()
    # A run started right after the kill: its root runs at once, and only a leader's drain can enqueue its dependants.
    run = start_run(DAG, {"key": f"y{since.timestamp():.3f}"})
    leader.wait()
    c.orchestrators.remove(leader)
    took = float(c.poll("SELECT extract(epoch FROM min(created_at) - %s::timestamptz)::float FROM workflow_node_jobs"
                        " WHERE run_id = %s AND node_name IN ('b', 'c') HAVING count(*) > 0", (since, run), timeout=30,
                        what="the run's dependants dispatched by the new leader"))
    fresh = c.orchestrator()
    c.poll("SELECT 1 FROM qw_orchestrators WHERE pid = %s AND role = 'standby'", (fresh.pid,), timeout=60,
           what="a fresh standby", interval=0.1)
    return took


def _first_completion_after_restart(c: Cluster, since: object) -> float:
    return float(c.poll(
        "SELECT extract(epoch FROM min(finished_at) - %s::timestamptz)::float FROM ingest_jobs"
        " WHERE queue = 'fetch' AND finished_at > pg_postmaster_start_time() HAVING count(*) > 0",
        (since,), timeout=60, what="a completion after the restart", interval=0.02))


def pg_restart(mode: str) -> Callable[[Cluster], float]:
    def trial(c: Cluster) -> float:
        from queue_workflows import node_queue

        _dephase()
        since = c.db_now()
        c.restart_postgres(mode)
        # A job enqueued (directly) the moment Postgres answers again: its completion times the workers' return.
        with psycopg.connect(c.url, autocommit=True) as conn:
            key = f"z{since.timestamp():.3f}"
            job = node_queue.enqueue_ingest_job("load", "fetch", {"key": key}, conn=conn)["id"]
        took = float(c.poll("SELECT extract(epoch FROM finished_at - %s::timestamptz)::float FROM ingest_jobs"
                            " WHERE id = %s AND status = 'completed'", (since, job), timeout=60,
                            what="a job enqueued after the restart, completed", interval=0.02))
        back = c.poll("SELECT extract(epoch FROM min(created_at) - %s::timestamptz)::float FROM ingest_jobs"
                      " WHERE args->>'key' LIKE 'p%%' AND created_at > pg_postmaster_start_time() HAVING count(*) > 0",
                      (since,), timeout=60, what="the producer enqueueing again", interval=0.02)
        c.notes.append(f"producer ({'PgBouncer' if c.bouncer else 'direct'}): enqueues acknowledged again {back:.2f}s after the stop")
        _settle(c)
        return took

    return trial


def _settle(c: Cluster) -> None:
    """Every load worker holds its lock again before the next trial (a worker that died would fail the run here)."""
    c.procs.check_alive(c.orchestrators)
    testing.wait_until(lambda: len(c.q(WORKER_LOCKS) or []) >= 2 * c.live_workers(), timeout=60,
                       interval=0.05, what="every worker's lock held again")


def terminate_backends(c: Cluster) -> float:
    _dephase()
    before = {r["pid"] for r in c.q(WORKER_LOCKS) or []}
    since = c.db_now()
    c.sql(c.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid = ANY(%s)",
          (list(before),))

    def restored() -> float | None:
        now = c.q(WORKER_LOCKS)
        if now and len({r['pid'] for r in now} - before) >= len(before):
            return (now[0]["t"] - since).total_seconds()
        return None

    return float(testing.wait_until(restored, timeout=30, interval=0.01, what="every worker's lock held on new sessions"))


def frozen_worker(c: Cluster) -> float:
    target = c.seat(kind="frozen")
    # Its code returns the moment it is thawed: the late result races the guard, and must not be stored.
    job = c.run_probe(target, hold=c.lease + 0.5)
    c.unpark()
    _dephase()
    since = c.db_now()
    target.send_signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        took = c.taken_over(job, target, since, timeout=6 * c.lease + 10)
        done = c.wait_done(job)
        time.sleep(max(0.0, c.lease + 1.5 - (time.monotonic() - frozen_at)))  # past its hold: the code returns on thaw
    finally:
        target.send_signal(signal.SIGCONT)
    _expect_exit(target, EXIT_JOB_TAKEN, 30, "a thawed worker whose job was taken over")
    after = c.sql(c.url, "SELECT status, claimed_by, result, attempts FROM ingest_jobs WHERE id = %s", (job,))[0]
    if after != {k: done[k] for k in after} or (after["result"] or {}).get("pid") == target.pid:
        raise FaultBroken(f"the thawed worker's late result was stored: {after}")
    return took


def partition(direction: str) -> Callable[[Cluster], float]:
    def trial(c: Cluster) -> float:
        assert c.netns is not None
        target = c.seat(argv=c.netns.argv(), url=c.tcp_url(), kind=f"cut-{direction}", spare=False)  # a spare would be cut off too
        job = c.run_probe(target, hold=HOLD)
        c.unpark()
        _dephase()
        since = c.db_now()
        c.netns.cut(direction)
        try:
            took = c.taken_over(job, target, since, timeout=6 * c.lease + 10)
            _expect_exit(target, EXIT_JOB_TAKEN, 4 * c.lease + 10, f"a worker cut off ({direction})")
        finally:
            c.netns.heal()
        c.wait_done(job)
        return took

    return trial


def pgbouncer_restart(c: Cluster) -> float:
    assert c.bouncer is not None
    _dephase()
    since = c.db_now()
    c.bouncer.stop()
    stopped = c.db_now()
    c.bouncer.start()
    return float(c.poll("SELECT extract(epoch FROM min(created_at) - %s::timestamptz)::float FROM ingest_jobs"
                        " WHERE queue = 'fetch' AND created_at > %s HAVING count(*) > 0", (since, stopped),
                        timeout=30, what="an enqueue through the restarted PgBouncer", interval=0.01))


def full_disk(c: Cluster) -> float:
    assert c.disk is not None and c.producer is not None
    log = c.producer.log_path  # type: ignore[attr-defined]
    refusals = log.read_text(errors="replace").count("out of disk space")
    # Opened before the fill: a new session may not start on a full disk (its relcache init file is written there).
    with psycopg.connect(c.url, autocommit=True) as held:
        c.disk.fill()
        try:
            testing.wait_until(lambda: log.read_text(errors="replace").count("out of disk space") > refusals or _refused(c),
                               timeout=30, interval=0.05, what="an enqueue refused for want of space")
            time.sleep(2.0)  # the cluster lives through a while of it
            c.procs.check_alive(c.orchestrators)
            try:
                c.sql(c.url, "SELECT 1")
                c.notes.append("a new connection during the fill: accepted")
            except psycopg.OperationalError as exc:
                c.notes.append(f"a new connection during the fill: {str(exc).strip().splitlines()[-1][:160]}")
        finally:
            since = held.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            c.disk.free()
    return float(c.poll("SELECT extract(epoch FROM min(finished_at) - %s::timestamptz)::float FROM ingest_jobs"
                        " WHERE queue = 'fetch' AND created_at > %s AND status = 'completed' HAVING count(*) > 0",
                        (since, since), timeout=60, what="a job enqueued after space returned, completed", interval=0.02))


def _refused(c: Cluster) -> bool:
    """The producer logs a kind of error once; after that, a refusal shows as an enqueue that fails here too."""
    from queue_workflows import node_queue

    try:
        node_queue.enqueue_ingest_job("load", "fetch", {"key": f"probe-full-{time.monotonic_ns()}"})
        return False
    except psycopg.OperationalError:
        return True


def clock_skew(seconds: int) -> Callable[[Cluster], None]:
    def trial(c: Cluster) -> None:
        lib = faketime_lib()
        target = c.seat(kind=f"skew{seconds:+d}", LD_PRELOAD=str(lib), FAKETIME=f"{seconds:+d}s", FAKETIME_DONT_FAKE_MONOTONIC="1")
        job = c.run_probe(target, hold=1.5 * c.lease)  # longer than its lease: renewed on the database's clock, never taken
        c.unpark()
        done = c.wait_done(job, timeout=6 * c.lease + 10)
        c.procs.stop([target])
        by = "the skewed worker" if done["claimed_by"].split(":")[2] == str(target.pid) else "ANOTHER worker"
        c.notes.append(f"its probe job ({1.5 * c.lease:g}s, lease {c.lease:g}s) completed by {by} on attempt {done['attempts']}; "
                       "no process logged a warning")
        return None

    return trial


RESTARTED = r"database session restored|liveness connection restored|waiting for Postgres"
FAULTS = [
    Fault("kill_worker", "`kill -9` of the worker running a probe job", "kill -> the probe job running on another worker (its new `started_at`)",
          kill_worker, sees=(r"reclaimed job \d+ on 'probe'",), status=True),
    Fault("kill_leader", "`kill -9` of the leading orchestrator (a standby is running)",
          "kill -> the dependants of a DAG run started just after the kill dispatched (their `created_at`)",
          kill_leader, sees=(r"leading \(term \d+\)",)),
    Fault("pg_restart_fast", "Postgres restarted, `pg_ctl -m fast` (sessions ended cleanly)",
          "stop -> a job enqueued once Postgres answers again, completed", pg_restart("fast"), needs="pg_restart", sees=(RESTARTED, r"leading \(term")),
    Fault("pg_restart_immediate", "Postgres restarted, `pg_ctl -m immediate` (a crash: recovery from WAL)",
          "stop -> a job enqueued once Postgres answers again, completed", pg_restart("immediate"), needs="pg_restart", sees=(RESTARTED,)),
    Fault("terminate_backends", "`pg_terminate_backend` of every worker session (both connections of each worker)",
          "terminate -> every worker's lock held again on new sessions", terminate_backends,
          sees=(r"liveness connection restored after", r"database session restored")),
    Fault("frozen_worker", "SIGSTOP of the worker running a probe job for the lease + 1.5 s, then SIGCONT",
          "SIGSTOP -> the probe job running on another worker", frozen_worker,
          sees=(r"exiting with code 77", r"reclaimed job \d+ on 'probe'"), status=True),
    Fault("partition_both", "the probe's worker (in a network namespace) cut off from Postgres both ways (iptables DROP)",
          "cut -> the probe job running on another worker", partition("both"), needs="partition", sees=(r"exiting with code 77",)),
    Fault("partition_out", "the same, its packets to Postgres dropped (one way)",
          "cut -> the probe job running on another worker", partition("out"), needs="partition", sees=(r"exiting with code 77",)),
    Fault("partition_in", "the same, Postgres's replies dropped (one way: its renewals still commit)",
          "cut -> the probe job running on another worker", partition("in"), needs="partition", sees=(r"exiting with code 77",)),
    Fault("pgbouncer_restart", "the producers' PgBouncer (transaction mode) stopped (SIGINT) and started again",
          "stop -> the next enqueue acknowledged through it (its `created_at`)", pgbouncer_restart, needs="pgbouncer",
          sees=(r"^enqueue failed, retrying",)),
    Fault("full_disk", "the tablespace under the database filled to the last byte for 2 s after the first refused enqueue, then freed",
          "space freed -> the first job enqueued after it completed", full_disk, needs="full_disk",
          sees=(r"^enqueue failed, retrying: DatabaseFullError", r"^WARNING Postgres is out of disk space")),
    Fault("clock_skew_plus30", "the probe's worker runs with its wall clock 30 s ahead (libfaketime)",
          "none: nothing fails; its probe job, 1.5 leases long, must complete on its first run, on the skewed worker", clock_skew(30), needs="clock_skew"),
    Fault("clock_skew_minus30", "the same, 30 s behind", "none: as above", clock_skew(-30), needs="clock_skew"),
]
BY_NAME = {fault.name: fault for fault in FAULTS}
