"""Contract 5, the transactional outbox: a node's terminal status and its dispatch event commit
together, on every terminal path; the drain is idempotent, retries a failing fan-out with a
backoff and poison-flags the run after N attempts; a crash between any two steps loses no event
and enqueues no node twice.
"""

from __future__ import annotations

import select

import psycopg
import pytest
from procs import query

import queue_workflows
from queue_workflows import jobstore, node_queue
from queue_workflows.common import sqlfile
from queue_workflows.dag import Workflow, store
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.leader import reclaim

_ADMIN = sqlfile.load("queue_workflows.ops", "admin.sql")
_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")

N = "qw_dag_nodes"


def chain(n: int = 2, **first) -> Workflow:
    wf = Workflow("chain").node("n0", f"{N}:echo", **first)
    for i in range(1, n):
        wf.node(f"n{i}", f"{N}:echo", deps=[f"n{i - 1}"])
    return wf


def job(url, run_id, name):
    return query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND node_name = %s", (run_id, name))[0]


def events(url):
    return query(url, "SELECT * FROM workflow_dispatch_events ORDER BY id")


def claim(url, conn, run_id, name):
    """Make the node running, as a claim would, with a worker id we control."""
    conn.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = 'w1', attempts = attempts + 1,"
                 " lease_expires_at = now() + interval '30 s', started_at = now() WHERE run_id = %s AND node_name = %s",
                 (run_id, name))
    return job(url, run_id, name)


def test_terminal_status_and_event_commit_together_and_notify_rides_the_commit(database_url, conn):
    run_id = queue_workflows.start_run(chain(), {})
    node = claim(database_url, conn, run_id, "n0")
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN qw_dispatch")
        with psycopg.connect(database_url) as worker:
            assert node_queue.mark_completed(node["id"], {"ok": 1}, worker_id="w1", conn=worker) is not None
            assert events(database_url) == []  # not visible before the commit ...
            worker.rollback()
        assert job(database_url, run_id, "n0")["status"] == "running" and events(database_url) == []
        assert not select.select([listener.fileno()], [], [], 0.2)[0]  # ... and a rollback wakes nobody
        with psycopg.connect(database_url) as worker:
            node_queue.mark_completed(node["id"], {"ok": 1}, worker_id="w1", conn=worker)
        notes = list(listener.notifies(timeout=2, stop_after=1))
    assert [(n.channel, n.payload) for n in notes] == [("qw_dispatch", str(run_id))]
    [event] = events(database_url)
    assert (event["run_id"], event["node_job_id"], event["node_name"], event["kind"]) == (run_id, node["id"], "n0", "completed")
    assert node_queue.mark_completed(node["id"], {"ok": 2}, conn=conn) is None  # idempotent terminal: no second event
    assert len(events(database_url)) == 1


def test_every_terminal_path_writes_the_event(database_url, conn):
    """Worker mark (failed), watchdog trip at its cap, reclaim at the attempt cap, operator cancel."""
    wf = Workflow("paths")
    for name in ("marked", "tripped", "reclaimed", "cancelled"):
        wf.node(name, f"{N}:echo", max_attempts=1)
    run_id = queue_workflows.start_run(wf, {})
    ids = {name: claim(database_url, conn, run_id, name)["id"] for name in ("marked", "tripped", "reclaimed")}
    ids["cancelled"] = job(database_url, run_id, "cancelled")["id"]
    node_queue.mark_failed(ids["marked"], "boom", worker_id="w1", conn=conn)
    jobstore.fetch_one(conn, jobstore.watchdog_trip_statement(node_queue.NODE_TABLE, ids["tripped"], "w1", error="budget", max_trips=1))
    conn.execute("UPDATE workflow_node_jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", (ids["reclaimed"],))
    reclaim.reclaim_orphans(conn, confirm_seconds=0)
    conn.execute(_ADMIN.sql("cancel_job", node_queue.NODE_TABLE), {"job_id": ids["cancelled"], "reason": "operator"})
    got = {(e["node_name"], e["kind"]) for e in events(database_url)}
    assert got == {("marked", "failed"), ("tripped", "failed"), ("reclaimed", "failed"), ("cancelled", "cancelled")}


def test_a_crash_inside_the_drain_loses_no_event_and_enqueues_nothing_twice(database_url, conn):
    run_id = queue_workflows.start_run(Workflow("fan").node("r", f"{N}:echo").node("a", f"{N}:echo", deps=["r"]).node("b", f"{N}:echo", deps=["r"]), {})
    node_queue.mark_completed(job(database_url, run_id, "r")["id"], {}, conn=conn)

    def crash_after_fan_out(c, rid, completed):
        store.advance_run(c, rid, completed)  # the dependants are written ...
        c.close()  # ... and the orchestrator dies before the commit

    with psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as doomed:
        with pytest.raises(psycopg.OperationalError):
            DispatchDrain(advance=crash_after_fan_out).drain_once(doomed)
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE run_id = %s", (run_id,)) == [{"n": 1}]
    assert [e["processed_at"] for e in events(database_url)] == [None]  # the event is still there
    assert DispatchDrain().drain_once(conn) == 1
    rows = query(database_url, "SELECT node_name, status FROM workflow_node_jobs WHERE run_id = %s ORDER BY node_name", (run_id,))
    assert rows == [{"node_name": "a", "status": "queued"}, {"node_name": "b", "status": "queued"}, {"node_name": "r", "status": "completed"}]


def test_duplicate_delivery_is_idempotent(database_url, conn):
    run_id = queue_workflows.start_run(Workflow("dup").node("r", f"{N}:echo").node("a", f"{N}:echo", deps=["r"]), {})
    node_queue.mark_completed(job(database_url, run_id, "r")["id"], {}, conn=conn)
    drain = DispatchDrain()
    assert drain.drain_once(conn) == 1
    before = query(database_url, "SELECT id, node_name, status, created_at FROM workflow_node_jobs ORDER BY id")
    conn.execute("UPDATE workflow_dispatch_events SET processed_at = NULL")  # delivered again
    conn.execute("INSERT INTO workflow_dispatch_events (run_id, node_job_id, node_name, kind) SELECT run_id, node_job_id, node_name, kind FROM workflow_dispatch_events")
    assert drain.drain_once(conn) == 2
    assert query(database_url, "SELECT id, node_name, status, created_at FROM workflow_node_jobs ORDER BY id") == before
    # and the unique (run_id, node_name) refuses a second row even from a writer that skips the dispatcher
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute("INSERT INTO workflow_node_jobs (run_id, node_name, queue) VALUES (%s, 'a', 'cpu')", (run_id,))


def test_a_failing_fan_out_is_retried_with_backoff_then_succeeds(database_url, conn):
    run_id = queue_workflows.start_run(chain(), {})
    node_queue.mark_completed(job(database_url, run_id, "n0")["id"], {}, conn=conn)
    calls = []

    def flaky(c, rid, completed):
        calls.append(rid)
        if len(calls) == 1:
            store.advance_run(c, rid, completed)  # its writes must be rolled back with the failure
            raise RuntimeError("transient fan-out failure")
        return store.advance_run(c, rid, completed)

    drain = DispatchDrain(advance=flaky, backoff_base=30)
    assert drain.drain_once(conn) == 1
    [event] = events(database_url)
    assert event["attempts"] == 1 and "transient fan-out failure" in event["last_error"] and event["processed_at"] is None
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs") == [{"n": 1}]
    assert drain.drain_once(conn) == 0  # not due yet: the backoff holds it
    conn.execute("UPDATE workflow_dispatch_events SET next_attempt_at = now()")
    assert drain.drain_once(conn) == 1
    assert job(database_url, run_id, "n1")["status"] == "queued"
    assert events(database_url)[0]["processed_at"] is not None


def test_poison_flag_after_n_failed_fan_outs(database_url, conn):
    run_id = queue_workflows.start_run(chain(), {})
    other = queue_workflows.start_run(chain(), {})
    node_queue.mark_completed(job(database_url, run_id, "n0")["id"], {}, conn=conn)
    node_queue.mark_completed(job(database_url, other, "n0")["id"], {}, conn=conn)

    def broken_for_one_run(c, rid, completed):
        if rid == run_id:
            raise ValueError("cannot fan out")
        return store.advance_run(c, rid, completed)

    drain = DispatchDrain(advance=broken_for_one_run, max_attempts=3, backoff_base=0)
    for _ in range(5):
        drain.drain_once(conn)
    poisoned = [e for e in events(database_url) if e["run_id"] == run_id]
    assert [(e["attempts"], e["poisoned_at"] is not None) for e in poisoned] == [(3, True)]
    run = query(database_url, "SELECT * FROM workflow_runs WHERE id = %s", (run_id,))[0]
    assert run["poisoned_at"] is not None and run["error"] == "dispatch poisoned after 3 attempts: ValueError: cannot fan out"
    assert job(database_url, other, "n1")["status"] == "queued"  # the healthy run went on
    assert queue_workflows.run_status(run_id)["poisoned_at"] is not None


def test_a_completion_does_not_wait_for_a_drain_in_flight_on_its_run(database_url, conn):
    """The drain locks the run row; the completion's event references it (a foreign key), and must not queue behind it."""
    run_id = queue_workflows.start_run(chain(), {})
    node = claim(database_url, conn, run_id, "n0")
    with psycopg.connect(database_url) as drain:
        drain.execute(_DAG["dag_lock_run_head"], {"run_id": run_id})  # a dispatch of this run, mid-transaction
        with psycopg.connect(database_url) as worker:
            worker.execute("SET lock_timeout = '1s'")
            assert node_queue.mark_completed(node["id"], {"ok": 1}, worker_id="w1", conn=worker) is not None
        drain.rollback()
    assert [e["node_name"] for e in events(database_url)] == ["n0"]
