"""Contract 4 and 9 with a real partition: a worker whose traffic to Postgres is dropped (both
ways, or one way) stops itself (exit 77) before its lease lapses, its job is taken over by a
worker that can still reach the database, and the worker rejoins once the network returns.

The partitioned worker runs in a network namespace of its own and reaches a private Postgres over
TCP through a veth pair; iptables inside the namespace drops its packets, so only it is cut off.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import netns as netns_support
import pytest
import qw_fault_tasks
from procs import PrivatePostgres, Procs, log_text, pid_of, query, service_env, wait_exit, wait_until, wait_workers_ready
from psycopg import conninfo

from queue_workflows import db, node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess

LEASE = 3.0
WHY_NOT = netns_support.unavailable()


@pytest.fixture
def netns() -> Iterator[netns_support.Netns]:
    if WHY_NOT is not None:
        pytest.skip(f"partition tests {WHY_NOT}")
    ns = netns_support.Netns()
    try:
        yield ns
    finally:
        ns.close()


@pytest.fixture
def tcp_url(netns: netns_support.Netns, private_pg: PrivatePostgres, private_database_url: str) -> str:
    """The private server, listening also on the veth address the namespace reaches; its DSN over TCP."""
    register_ingest_task("hold_first", qw_fault_tasks.hold_first)
    private_pg.stop()
    with open(Path(private_pg.server.pgdata) / "pg_hba.conf", "a") as hba:
        hba.write(f"host all all {netns.ns_ip}/32 trust\n")
    private_pg.start(listen=netns.host_ip)
    return conninfo.make_conninfo(private_database_url, host=netns.host_ip, port="5432")


def _env(url: str) -> dict[str, str]:
    return service_env(url, QW_APP="qw_fault_tasks", QW_LEASE_SECONDS=str(LEASE), QW_LEASE_RENEW_SECONDS="0.5",
                       QW_HEARTBEAT_SECONDS="1")


def _between_polls(url: str) -> bool:
    """The namespace's worker has just ended a poll (its session's last statement, the promotion of due
    jobs, ended under 0.2 s ago): a cut now finds it in its wait, no round trip of its in flight."""
    return bool(query(url, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND client_addr IS NOT NULL AND state = 'idle' "
                           "AND query LIKE 'WITH due AS%' AND clock_timestamp() - state_change < interval '0.2 s'"))


def _job(url: str, job_id: int) -> dict:
    [row] = query(url, "SELECT * FROM ingest_jobs WHERE id = %s", (job_id,))
    return row


def _executions(url: str, token: str) -> list[int]:
    return [r["worker_pid"] for r in query(url, "SELECT worker_pid FROM test_executions WHERE token = %s ORDER BY id", (token,))]


def _enqueue(url: str, token: str, hold: float) -> int:
    with db.connect(url=url) as conn, conn.transaction():
        return int(node_queue.enqueue_ingest_job("hold_first", "fetch", {"token": token, "hold": hold}, conn=conn)["id"])


@pytest.mark.parametrize("direction", ["both", pytest.param("out", marks=pytest.mark.soak), pytest.param("in", marks=pytest.mark.soak)])  # one-way cuts: soak stage
def test_a_partitioned_worker_stops_before_its_lease_lapses_and_rejoins_when_the_network_returns(
    netns: netns_support.Netns, tcp_url: str, private_database_url: str, procs: Procs, direction: str,
) -> None:
    url = private_database_url  # the unix socket: what the test, the orchestrator and the taker use
    env = _env(url)
    worker_argv = netns.argv(sys.executable, "-m", "qw_services.worker", "--queue=fetch")
    procs.orchestrator(env)
    cut_off = procs._spawn("worker-fetch-cut", worker_argv, _env(tcp_url))
    wait_workers_ready(url, [cut_off])
    token = f"partition-{direction}"
    job_id = _enqueue(url, token, hold=60)
    wait_until(lambda: _executions(url, token), timeout=20, what=f"job {job_id} running\n{procs.logs()}")
    taker = procs.worker(env, "fetch")
    wait_workers_ready(url, [taker])
    assert pid_of(_job(url, job_id)["claimed_by"]) == cut_off.pid

    netns.cut(direction)
    cut_at = time.monotonic()
    gone_at = None  # the database's clock when the cut-off worker was seen gone
    while gone_at is None:
        assert time.monotonic() - cut_at < 4 * LEASE, f"the cut-off worker is still running\n{procs.logs()}"
        if cut_off.poll() is not None:
            gone_at = query(url, "SELECT clock_timestamp() AS t")[0]["t"]
        time.sleep(0.02)
    stopped_after = time.monotonic() - cut_at
    assert cut_off.returncode == 77, procs.logs()
    assert "lease could not be renewed" in log_text(cut_off), procs.logs()
    taken = wait_until(lambda: (r := _job(url, job_id))["claimed_by"] and pid_of(r["claimed_by"]) == taker.pid and r,
                       timeout=4 * LEASE, what=f"job taken over\n{procs.logs()}")
    takeover = time.monotonic() - cut_at
    assert gone_at <= taken["started_at"], f"the taker started at {taken['started_at']}, before the cut-off worker stopped ({gone_at})"
    done = wait_until(lambda: (r := _job(url, job_id))["status"] == "completed" and r, timeout=20, what=f"job done\n{procs.logs()}")
    assert done["result"]["pid"] == taker.pid and done["attempts"] == 2, done
    assert _executions(url, token) == [cut_off.pid, taker.pid]

    # Its supervisor restarts it while the network is still down: it waits, then rejoins when the network returns.
    restarted = procs._spawn("worker-fetch-restarted", worker_argv, _env(tcp_url))
    time.sleep(1.0)
    assert restarted.poll() is None, procs.logs()
    assert not query(url, "SELECT 1 FROM worker_heartbeats WHERE pid = %s", (restarted.pid,)), "it cannot have reached the database"
    netns.heal()
    healed_at = time.monotonic()
    wait_workers_ready(url, [restarted], timeout=30)
    rejoined = time.monotonic() - healed_at
    taker.send_signal(signal.SIGTERM)
    wait_exit(taker, 15, procs)
    after = _enqueue(url, f"{token}-after", hold=0)
    wait_until(lambda: _job(url, after)["status"] == "completed", timeout=20, what=f"the rejoined worker ran a job\n{procs.logs()}")
    assert pid_of(_job(url, after)["claimed_by"]) == restarted.pid
    print(f"partition ({direction}): worker stopped itself after {stopped_after:.2f}s, job taken over after {takeover:.2f}s "
          f"(lease {LEASE:g}s); restarted worker rejoined {rejoined:.2f}s after the network returned")


@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_an_idle_worker_that_stays_up_through_a_partition_claims_again_soon_after_it_heals(
    netns: netns_support.Netns, tcp_url: str, private_database_url: str, procs: Procs,
) -> None:
    """Its blocked statements fail within QW_DB_NETWORK_TIMEOUT_SECONDS and it reconnects: no wait on the kernel's retransmissions."""
    url, outage = private_database_url, 8.0
    env = _env(tcp_url) | {"QW_POLL_SECONDS": "1", "QW_DB_NETWORK_TIMEOUT_SECONDS": "2"}
    worker = procs._spawn("worker-fetch-cut", netns.argv(sys.executable, "-m", "qw_services.worker", "--queue=fetch"), env)
    wait_workers_ready(url, [worker])
    netns.cut("both")
    time.sleep(outage)  # the outage itself: its heartbeats and polls are sent into the void meanwhile
    netns.heal()
    healed_at = time.monotonic()
    job_id = _enqueue(url, "after-outage", hold=0)
    wait_until(lambda: _job(url, job_id)["status"] == "completed", timeout=30, what=f"the job done\n{procs.logs()}")
    back_after = time.monotonic() - healed_at
    print(f"idle worker through a {outage:g}s partition: ran a job {back_after:.2f}s after the network returned")
    assert worker.poll() is None and pid_of(_job(url, job_id)["claimed_by"]) == worker.pid, procs.logs()
    assert back_after < 3.5, f"the worker took {back_after:.2f}s to claim again after the network returned\n{log_text(worker)[-2000:]}"


@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_a_claim_whose_reply_comes_back_after_its_lease_is_never_run(
    netns: netns_support.Netns, tcp_url: str, private_database_url: str, procs: Procs,
) -> None:
    """Replies dropped: the claim commits on the server, its lease lapses, another worker runs the job;
    when the reply finally arrives the worker must not start it (its lease counts from when it was sent)."""
    url = private_database_url
    env = _env(tcp_url) | {"QW_POLL_SECONDS": "0.5", "QW_IDLE_BATON": "false", "QW_DB_NETWORK_TIMEOUT_SECONDS": "60"}
    late = procs._spawn("worker-fetch-late", netns.argv(sys.executable, "-m", "qw_services.worker", "--queue=fetch"), env)
    procs.orchestrator(_env(url))
    wait_workers_ready(url, [late])
    # Cut between two of its polls (0.5 s apart): a cut during its first drain, or a poll, left that
    # round trip's reply dropped and the worker waiting 60 s on it, so it never claimed the job (CI, once).
    wait_until(lambda: _between_polls(url), timeout=10, interval=0.01, what=f"the worker between two polls\n{procs.logs()}")
    netns.cut("in")
    token = "late-reply"
    job_id = _enqueue(url, token, hold=3)
    wait_until(lambda: (r := _job(url, job_id))["claimed_by"] and pid_of(r["claimed_by"]) == late.pid, timeout=10,
               what=f"the claim committed on the server\n{procs.logs()}")
    taker = procs.worker(_env(url), "fetch")
    wait_until(lambda: (r := _job(url, job_id))["claimed_by"] and pid_of(r["claimed_by"]) == taker.pid, timeout=6 * LEASE,
               what=f"job taken over\n{procs.logs()}")
    netns.heal()  # the server's retransmission of the claim's reply now gets through
    done = wait_until(lambda: (r := _job(url, job_id))["status"] == "completed" and r, timeout=20, what=f"job done\n{procs.logs()}")
    try:
        code: int | None = late.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    assert _executions(url, token) == [taker.pid], f"the late claim's job ran on the cut-off worker too\n{procs.logs()}"
    assert code == 77 and "to come back" in log_text(late), f"exit {code}\n{procs.logs()}"
    assert pid_of(done["claimed_by"]) == taker.pid
