"""Orchestrator HA: exactly one leader acts at a time, and a standby takes over when it dies.

Two electors in one process, on real connections, for the fencing itself; real orchestrator
processes (kill -9, SIGTERM, SIGSTOP, a terminated backend) for failover. The lease itself, on a
virtual clock: test_leader_lease.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest
import qw_test_app
from procs import Procs, log_text, query, service_env, wait_for_log, wait_until, wait_workers_ready

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.leader.leadership import Elector, LeadershipLost, Term
from queue_workflows.ops import admin

# The backend of the leader's lease connection, in this test's database only.
LEASE_HOLDER = """
SELECT a.pid FROM qw_leadership l
  JOIN pg_stat_activity a ON a.pid = l.backend_pid AND a.backend_start = l.backend_start
 WHERE a.datname = current_database()
"""


def terminate_leader_backend(url: str) -> int:
    pid = query(url, LEASE_HOLDER)[0]["pid"]
    query(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s AND datname = current_database()", (pid,))
    return pid


class Campaign:
    """An elector campaigning on a thread of its own; `term` once it leads."""

    def __init__(self, name: str) -> None:
        self.elector = Elector(orchestrator_id=name, poll_seconds=0.05, beat_seconds=0.1)
        self.stop = threading.Event()
        self.term: Term | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.term = self.elector.campaign(self.stop)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.elector.resign()


@pytest.fixture
def campaigns(database_url: str):
    started: list[Campaign] = []

    def start(name: str) -> Campaign:
        started.append(Campaign(name))
        return started[-1]

    yield start
    for c in started:
        c.close()


def roles(url: str) -> dict[str, str]:
    return {r["orchestrator_id"]: r["role"] for r in query(url, "SELECT orchestrator_id, role FROM qw_orchestrators")}


def test_one_leads_and_the_other_stands_by_while_it_holds(database_url: str, campaigns) -> None:
    a = campaigns("a")
    wait_until(lambda: a.term, timeout=10, what="a to lead")
    b = campaigns("b")
    wait_until(lambda: roles(database_url).get("b") == "standby", timeout=10, what="b standing by")
    seen = query(database_url, "SELECT beat_at FROM qw_orchestrators WHERE orchestrator_id = 'b'")[0]["beat_at"]
    wait_until(lambda: query(database_url, "SELECT beat_at FROM qw_orchestrators WHERE orchestrator_id = 'b'")[0]["beat_at"] > seen,
               timeout=10, what="b to campaign again")
    assert b.term is None and roles(database_url) == {"a": "leader", "b": "standby"}


def test_a_new_term_waits_for_the_old_leaders_transaction_and_then_fences_it_out(database_url: str, campaigns) -> None:
    a = campaigns("a")
    old = wait_until(lambda: a.term, timeout=10, what="a to lead")
    with db.connect(url=database_url) as work:  # a's service, mid-transaction, has passed the guard
        old.guard(work)
        work.execute("SELECT 1")
        terminate_leader_backend(database_url)  # a's lock connection dies; a has not noticed yet
        b = campaigns("b")
        # b sees a's lease connection gone, but its new term waits on a's open transaction: no overlap.
        wait_until(lambda: query(database_url, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                                               "AND wait_event_type = 'Lock' AND query LIKE '%%FOR UPDATE OF l%%'"),
                   timeout=10, what="b's new term to wait for a's transaction")
        assert b.term is None
        work.commit()
    new = wait_until(lambda: b.term, timeout=10, what="b to lead")
    assert new.epoch == old.epoch + 1
    with db.connect(url=database_url) as late, pytest.raises(LeadershipLost, match="superseded"):
        old.guard(late)  # a's next transaction is refused, and its term is over
    assert old.ended.is_set()
    with db.connect(url=database_url) as fine:
        new.guard(fine)


def test_a_leader_that_loses_its_connection_steps_down(database_url: str, campaigns) -> None:
    a = campaigns("a")
    term = wait_until(lambda: a.term, timeout=10, what="a to lead")
    holding = threading.Thread(target=a.elector.hold, args=(term, a.stop), daemon=True)
    holding.start()
    terminate_leader_backend(database_url)
    wait_until(lambda: not holding.is_alive(), timeout=5, what="hold to return")
    assert term.ended.is_set()
    with db.connect(url=database_url) as conn, pytest.raises(LeadershipLost):
        term.guard(conn)


def test_the_guard_joins_the_callers_transaction(database_url: str, campaigns) -> None:
    """The guard never commits on its own: a refused term leaves the caller's transaction to roll back."""
    a = campaigns("a")
    term = wait_until(lambda: a.term, timeout=10, what="a to lead")
    with db.connect(url=database_url) as conn:
        term.guard(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.rollback()


# Real processes ------------------------------------------------------------------------------


def leader_pid(url: str) -> int | None:
    """The orchestrator leading the current term (a deposed leader's row may still say 'leader' until it beats again)."""
    rows = query(url, "SELECT o.pid FROM qw_orchestrators o JOIN qw_leadership l ON o.epoch = l.epoch WHERE o.role = 'leader'")
    return rows[0]["pid"] if len(rows) == 1 else None


def leader_and_standby(url: str, procs: Procs) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    env = service_env(url)
    first = procs.orchestrator(env)
    wait_for_log(first, "orchestrator running", timeout=30)
    second = procs.orchestrator(env)
    wait_for_log(second, "standing by", timeout=30)
    return first, second


@pytest.mark.multiprocess
def test_kill_9_of_the_leader_hands_leadership_to_the_standby_within_two_seconds(database_url: str, procs: Procs) -> None:
    first, second = leader_and_standby(database_url, procs)
    assert leader_pid(database_url) == first.pid
    epoch = query(database_url, "SELECT epoch FROM qw_leadership")[0]["epoch"]
    killed_at = time.monotonic()
    os.kill(first.pid, signal.SIGKILL)
    wait_for_log(second, "orchestrator running", timeout=10)
    took = time.monotonic() - killed_at
    assert took < 2.0, f"failover took {took:.2f}s"
    assert query(database_url, "SELECT epoch FROM qw_leadership")[0]["epoch"] == epoch + 1
    shown = {o["pid"]: o["role"] for o in admin.orchestrator_list()}
    assert shown == {first.pid: "deposed", second.pid: "leader"}  # the dead one's row until it is pruned


@pytest.mark.multiprocess
def test_a_clean_stop_of_the_leader_releases_its_lease_to_the_standby_at_once(database_url: str, procs: Procs) -> None:
    first, second = leader_and_standby(database_url, procs)
    stopped_at = time.monotonic()
    first.send_signal(signal.SIGTERM)
    wait_until(lambda: leader_pid(database_url) == second.pid, timeout=10, what=f"the standby to lead\n{procs.logs()}")
    took = time.monotonic() - stopped_at
    assert took < 2.0, f"handover took {took:.2f}s"
    assert first.wait(timeout=10) == 0


@pytest.mark.multiprocess
def test_a_terminated_leader_connection_leaves_exactly_one_leader(database_url: str, procs: Procs) -> None:
    first, second = leader_and_standby(database_url, procs)
    terminate_leader_backend(database_url)
    wait_for_log(first, "stepping down", timeout=10)
    wait_until(lambda: leader_pid(database_url) is not None and len(query(database_url, LEASE_HOLDER)) == 1,
               timeout=10, what="one leader again")
    leader = leader_pid(database_url)
    epoch = query(database_url, "SELECT epoch FROM qw_leadership")[0]["epoch"]
    holder = query(database_url, "SELECT o.pid FROM qw_orchestrators o WHERE o.epoch = %s AND o.role = 'leader'", (epoch,))
    assert [r["pid"] for r in holder] == [leader] and leader in (first.pid, second.pid)
    assert first.poll() is None and second.poll() is None  # the loser stands by, it does not exit


def reclaims_of(url: str, job_id: int) -> int:
    return query(url, "SELECT count(*) AS n FROM job_events WHERE job_table = 'ingest_jobs' AND job_id = %s "
                      "AND from_status = 'running' AND to_status = 'queued'", (job_id,))[0]["n"]


@pytest.mark.multiprocess
def test_a_frozen_leader_loses_its_lease_to_the_standby_and_stays_fenced_after_sigcont(database_url: str, procs: Procs) -> None:
    register_ingest_task("record", qw_test_app.record)
    lease = 2.0
    # A 60 s job lease: the killed worker's job can only come back through a leader's sweep.
    env = service_env(database_url, QW_LEADER_LEASE_SECONDS=str(lease), QW_LEADER_RENEW_SECONDS="0.5",
                      QW_LEASE_SECONDS="60", QW_LEASE_RENEW_SECONDS="20")
    first = procs.orchestrator(env)
    wait_for_log(first, "orchestrator running", timeout=30)
    second = procs.orchestrator(env)
    wait_for_log(second, "standing by", timeout=30)
    worker = procs.worker(env, "fetch")
    wait_workers_ready(database_url, [worker])
    job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": "frozen-leader", "first_run_sleep": 60})["id"]
    wait_until(lambda: query(database_url, "SELECT 1 FROM test_executions WHERE token = 'frozen-leader'"), timeout=15, what="the job's body to start")

    os.kill(first.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        os.kill(worker.pid, signal.SIGKILL)
        wait_until(lambda: leader_pid(database_url) == second.pid, timeout=lease + 8, what=f"the standby to lead\n{procs.logs()}")
        took = time.monotonic() - frozen_at
        wait_until(lambda: reclaims_of(database_url, job_id), timeout=10, what=f"the new leader to reclaim job {job_id}\n{procs.logs()}")
        assert first.poll() is None
    finally:
        os.kill(first.pid, signal.SIGCONT)
    print(f"SIGSTOP of the leader -> standby leads: {took:.2f}s (lease {lease:g}s)")
    assert took < lease + 4, f"takeover took {took:.2f}s"
    wait_for_log(first, "standing by again", timeout=10)
    wait_until(lambda: {o["pid"]: o["role"] for o in admin.orchestrator_list()} == {first.pid: "standby", second.pid: "leader"},
               timeout=10, what=f"the old leader to stand by\n{procs.logs()}")
    assert reclaims_of(database_url, job_id) == 1
    assert query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job_id,))[0]["status"] == "queued"
    assert f"reclaimed job {job_id} " in log_text(second) and f"reclaimed job {job_id} " not in log_text(first)
    assert leader_pid(database_url) == second.pid and first.poll() is None
