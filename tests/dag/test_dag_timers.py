"""Sleep and wait_event nodes: validated before any write, held 'waiting' (no worker), fired by the timekeeper.

Deadlines are rows, so the in-process tests move a deadline into the past with SQL instead of
waiting for it; the real-process test lets real time pass, kills the orchestrator -9 mid-sleep,
and checks a new one wakes the node on time (and fires a deadline missed while all was down).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from dag_rows import complete, rows, states
from procs import query, service_env, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import InvalidPayloadError, send_event
from queue_workflows.dag import Workflow, WorkflowValidationError, cancel_run, restart_run, validate
from queue_workflows.dag.control import RunStateError
from queue_workflows.dag.events import event_status
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.dag.timekeeper import Pacer, Timekeeper

N = "qw_dag_nodes"


def tick(conn) -> None:
    """One timekeeper step, then the drain: what the leader's two services do when woken."""
    Timekeeper()._step(conn)
    DispatchDrain().drain_once(conn)


def pass_deadline(url: str, run_id: int, node: str) -> None:
    query(url, "UPDATE workflow_node_jobs SET wake_at = now() - interval '1 second' WHERE run_id = %s AND node_name = %s", (run_id, node))


def nap(**sleep) -> Workflow:
    return Workflow("nap").sleep("nap", **sleep).node("after", f"{N}:echo", deps=["nap"], inputs={"woke": {"$from": "nap.slept_until"}})


def approval(**wait) -> Workflow:
    return (Workflow("approval").wait_event("approval", **{"key": "order-7", **wait})
            .node("ship", f"{N}:echo", deps=["approval"], inputs={"ok": {"$from": "approval.approved"}}))


def test_both_forms_validate_and_round_trip():
    built = Workflow("t").sleep("a", seconds=5).sleep("b", until="2030-01-01T00:00:00Z", deps=["a"]) \
        .wait_event("c", key={"$from": "context.order"}, timeout=60, default={"approved": False}, deps=["b"])
    data = validate(built).to_dict()
    assert data["nodes"][0]["kind"] == "sleep" and data["nodes"][0]["for"] == 5
    assert data["nodes"][2]["key"] == {"$from": "context.order"} and data["nodes"][2]["default"] == {"approved": False}
    assert validate(data).to_dict() == data
    assert validate({"name": "t", "nodes": [{"id": "w", "kind": "wait_event", "key": "k"}]}).nodes[0].is_timer


@pytest.mark.parametrize(("node", "message"), [
    ({"kind": "sleep"}, "node 'x': a sleep needs exactly one of 'for' (seconds) and 'until'"),
    ({"kind": "sleep", "for": 1, "until": "2030-01-01T00:00:00Z"}, "node 'x': a sleep needs exactly one of"),
    ({"kind": "sleep", "for": -1}, "node 'x': 'for' must be a number of seconds (0 or more"),
    ({"kind": "sleep", "for": "soon"}, "node 'x': 'for' must be a number of seconds"),
    ({"kind": "sleep", "for": float("nan")}, "node 'x': 'for' must be a number of seconds"),
    ({"kind": "sleep", "until": "tomorrow"}, "node 'x': 'until' is not an ISO 8601 time"),
    ({"kind": "sleep", "until": "2030-01-01T00:00:00"}, "node 'x': 'until' needs a UTC offset"),
    ({"kind": "sleep", "for": {"$from": 3}}, "node 'x': 'for'"),
    ({"kind": "sleep", "for": 1, "key": "k"}, "node 'x': 'key' is not a key of a sleep node"),
    ({"kind": "sleep", "for": 1, "call": f"{N}:echo"}, "node 'x': a sleep node runs nothing"),
    ({"kind": "sleep", "for": 1, "queue": "gpu", "model": "m"}, "node 'x': a sleep node takes no queue or model"),
    ({"kind": "sleep", "for": 1, "inputs": {"a": 1}}, "node 'x': a sleep node takes no inputs"),
    ({"kind": "wait_event"}, "node 'x': a wait_event node needs a 'key'"),
    ({"kind": "wait_event", "key": ""}, "node 'x': 'key' must be 1 to 200 characters"),
    ({"kind": "wait_event", "key": "k", "timeout": 0}, "node 'x': 'timeout' must be a number of seconds (more than 0"),
    ({"kind": "wait_event", "key": "k", "timeout": 5, "default": [1]}, "node 'x': 'default' must be a JSON object"),
    ({"kind": "wait_event", "key": "k", "default": {"a": 1}}, "node 'x': 'default' is the output on timeout: give a 'timeout' too"),
    ({"call": f"{N}:echo", "for": 5}, "node 'x': 'for' belong(s) to a sleep or wait_event node, not a 'task' node"),
])
def test_a_malformed_timer_node_is_refused_by_name_and_nothing_is_written(database_url, node, message):
    with pytest.raises(WorkflowValidationError) as refused:
        queue_workflows.start_run({"name": "bad", "nodes": [{"id": "x", **node}]}, {})
    assert message in str(refused.value)
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 0}]


def test_a_sleep_waits_without_a_worker_and_wakes_its_dependants(database_url, conn):
    run_id = queue_workflows.start_run(nap(seconds=3600), {})
    row = rows(database_url, run_id)["nap"]
    assert row["status"] == "waiting" and row["node_module"] is None and row["inputs"] == {"for": 3600}
    assert timedelta(seconds=3590) < row["wake_at"] - row["created_at"] <= timedelta(seconds=3600)
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE status = 'queued'") == [{"n": 0}]  # nothing to claim
    assert queue_workflows.run_status(run_id)["nodes"]["nap"]["wake_at"] == row["wake_at"]
    tick(conn)
    assert states(database_url, run_id) == {"nap": "waiting"}  # not due: nothing fires
    pass_deadline(database_url, run_id, "nap")
    tick(conn)
    done = rows(database_url, run_id)
    woke = done["nap"]["context_delta"]["slept_until"]
    assert done["nap"]["status"] == "completed" and datetime.fromisoformat(woke) == done["nap"]["wake_at"]
    assert done["after"]["status"] == "queued" and done["after"]["inputs"] == {"woke": woke}


def test_sleep_values_are_resolved_when_the_node_is_reached(database_url, conn):
    wf = (Workflow("plan").node("plan", f"{N}:echo", inputs={"v": 1}).sleep("nap", seconds={"$from": "context.pause"}, deps=["plan"])
          .sleep("until", until={"$from": "context.at"}, deps=["plan"]))
    at = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    run_id = queue_workflows.start_run(wf, {"pause": 120, "at": at})
    assert set(rows(database_url, run_id)) == {"plan"}  # not reached yet: nothing resolved, no deadline
    complete(database_url, conn, run_id, "plan", {"echo": {}})
    reached = rows(database_url, run_id)
    assert reached["nap"]["inputs"] == {"for": 120} and reached["until"]["wake_at"] == datetime.fromisoformat(at)
    tick(conn)  # an 'until' already past fires at once
    assert states(database_url, run_id)["until"] == "completed" and states(database_url, run_id)["nap"] == "waiting"


def test_a_reference_that_resolves_to_nonsense_fails_the_node_by_name(database_url, conn):
    run_id = queue_workflows.start_run(Workflow("bad").sleep("nap", seconds={"$from": "context.pause"}), {"pause": "soon"})
    row = rows(database_url, run_id)["nap"]
    assert row["status"] == "failed" and row["error"] == "node 'nap': 'for' must be a number of seconds (0 or more), not 'soon'"
    DispatchDrain().drain_once(conn)
    assert queue_workflows.run_status(run_id)["status"] == "failed"


def test_an_event_completes_its_waiting_node_in_the_senders_transaction_and_later_ones_are_refused(database_url, conn):
    run_id = queue_workflows.start_run(approval(timeout=3600), {})
    status = queue_workflows.run_status(run_id)["nodes"]["approval"]
    assert (status["status"], status["event_key"]) == ("waiting", "order-7") and status["timeout_at"] is not None
    with psycopg.connect(database_url) as sender:  # not committed yet: nothing has happened
        first = send_event("order-7", {"approved": True}, requested_by="ann", conn=sender)
        assert first["status"] == "applied" and states(database_url, run_id)["approval"] == "waiting"
    job = rows(database_url, run_id)["approval"]
    assert (job["status"], job["context_delta"]) == ("completed", {"approved": True}) and first["applied_to"] == [job["id"]]
    DispatchDrain().drain_once(conn)
    assert rows(database_url, run_id)["ship"]["inputs"] == {"ok": True}
    second = send_event("order-7", {"approved": False}, run_id=run_id)
    assert (second["status"], second["error"]) == ("rejected", f"node 'approval' of run {run_id} waiting on key 'order-7' is already completed")
    assert event_status(second["id"])["status"] == "rejected" and rows(database_url, run_id)["approval"]["context_delta"] == {"approved": True}


def test_of_two_concurrent_events_the_first_to_commit_wins(database_url):
    run_id = queue_workflows.start_run(approval(), {})
    with psycopg.connect(database_url) as one, psycopg.connect(database_url) as two:
        first = send_event("order-7", {"approved": "one"}, conn=one)
        outcome = []
        racer = threading.Thread(target=lambda: outcome.append(send_event("order-7", {"approved": "two"}, run_id=run_id, conn=two)))
        racer.start()
        wait_until(lambda: query(database_url, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                               "AND wait_event_type = 'Lock'")[0]["n"] == 1, timeout=10, what="the second event to wait")
        one.commit()
        racer.join(timeout=10)
        two.commit()
    assert first["status"] == "applied" and outcome[0]["status"] == "rejected"
    assert outcome[0]["error"] == f"node 'approval' of run {run_id} waiting on key 'order-7' is already completed"
    assert rows(database_url, run_id)["approval"]["context_delta"] == {"approved": "one"}


def test_an_event_sent_before_the_node_is_reached_is_kept_for_it(database_url, conn):
    wf = (Workflow("late").node("first", f"{N}:echo", inputs={"v": 1})
          .wait_event("approval", key={"$from": "context.order"}, deps=["first"]))
    run_id = queue_workflows.start_run(wf, {"order": "order-9"})
    with psycopg.connect(database_url, autocommit=True) as anyone:  # plain SQL works too
        event_id = anyone.execute("INSERT INTO workflow_events (event_key, run_id, payload) VALUES ('order-9', %s, %s) RETURNING id",
                                  (run_id, '{"approved": "early"}')).fetchone()[0]
    assert event_status(event_id)["status"] == "kept"
    second = send_event("order-9", {"approved": "second"}, run_id=run_id)
    assert second["status"] == "kept"
    complete(database_url, conn, run_id, "first", {"echo": {}})
    assert rows(database_url, run_id)["approval"]["event_key"] == "order-9"
    tick(conn)
    assert rows(database_url, run_id)["approval"]["context_delta"] == {"approved": "early"}  # the first sent wins
    assert event_status(event_id)["status"] == "applied"
    assert event_status(second["id"])["error"] == f"run {run_id} already took event {event_id} on key 'order-9'"


def test_a_kept_event_stays_ahead_of_one_sent_after_its_node_was_reached(database_url, conn):
    kept = send_event("order-7", {"approved": "kept"})
    run_id = queue_workflows.start_run(approval(), {})  # reached; the timekeeper has not looked yet
    later = send_event("order-7", {"approved": "later"}, run_id=run_id)
    assert (kept["status"], later["status"]) == ("kept", "kept") and states(database_url, run_id)["approval"] == "waiting"
    tick(conn)
    assert rows(database_url, run_id)["approval"]["context_delta"] == {"approved": "kept"}  # the first sent
    assert event_status(later["id"])["error"] == f"run {run_id} already took event {kept['id']} on key 'order-7'"


def test_an_event_without_a_run_reaches_every_waiter_and_one_with_a_run_only_that_one(database_url, conn):
    a = queue_workflows.start_run(approval(), {})
    b = queue_workflows.start_run(approval(), {})
    c = queue_workflows.start_run(approval(), {})
    send_event("order-7", {"approved": "c only"}, run_id=c)
    assert [states(database_url, r)["approval"] for r in (a, b, c)] == ["waiting", "waiting", "completed"]
    send_event("order-7", {"approved": "all"})
    assert [rows(database_url, r)["approval"]["context_delta"]["approved"] for r in (a, b, c)] == ["all", "all", "c only"]


def test_a_timeout_gives_the_default_or_fails_the_run_with_a_clear_error(database_url, conn):
    kind = queue_workflows.start_run(approval(timeout=60, default={"approved": False}), {})
    strict = queue_workflows.start_run(approval(timeout=60), {})
    pass_deadline(database_url, kind, "approval")
    pass_deadline(database_url, strict, "approval")
    tick(conn)
    assert rows(database_url, kind)["approval"]["context_delta"] == {"approved": False}
    assert rows(database_url, kind)["ship"]["inputs"] == {"ok": False}
    failed = queue_workflows.run_status(strict)
    assert failed["status"] == "failed"
    assert failed["nodes"]["approval"]["error"] == "node 'approval' timed out after 60s: no event on key 'order-7' (and no default)"


def test_bad_events_are_refused_and_write_nothing(database_url, conn):
    run_id = queue_workflows.start_run(approval(), {})
    for key, payload, kwargs, error, message in [
        ("", {}, {}, InvalidPayloadError, "event key must be 1 to 200 characters"),
        ("k", [1], {}, InvalidPayloadError, "an event payload must be a JSON object"),
        ("k", {"a": "\x00"}, {}, InvalidPayloadError, "event payload"),
        ("k", {}, {"run_id": 0}, InvalidPayloadError, "run id must be a positive integer"),
        ("k", {}, {"run_id": run_id + 100}, RunStateError, f"no workflow run {run_id + 100}"),
    ]:
        with pytest.raises(error, match=message):
            send_event(key, payload, **kwargs)
    assert query(database_url, "SELECT count(*) AS n FROM workflow_events") == [{"n": 0}]
    query(database_url, "INSERT INTO workflow_events (event_key, payload, status) VALUES ('order-7', '[1]', 'applied')")  # plain SQL
    [row] = query(database_url, "SELECT status, error FROM workflow_events")
    assert row == {"status": "rejected", "error": "an event payload must be a JSON object (it becomes the node's output), not array"}
    assert states(database_url, run_id)["approval"] == "waiting"


def test_cancel_cancels_waiting_nodes_refuses_their_events_and_restart_rearms_them(database_url, conn):
    wf = Workflow("both").sleep("nap", seconds=600).sleep("alarm", until="2000-01-01T00:00:00Z") \
        .wait_event("approval", key="order-7", timeout=900, deps=["alarm"])
    run_id = queue_workflows.start_run(wf, {})
    tick(conn)  # the alarm fires, the wait is reached
    before = rows(database_url, run_id)
    assert before["approval"]["status"] == "waiting"
    assert sorted(cancel_run(run_id)["cancelled"]) == ["approval", "nap"]
    refused = send_event("order-7", {"approved": True}, run_id=run_id)
    assert refused["error"] == f"run {run_id} is cancelled: it takes no events"
    assert sorted(restart_run(run_id)["reset"]) == ["approval", "nap"]
    after = rows(database_url, run_id)
    assert after["nap"]["status"] == after["approval"]["status"] == "waiting"
    assert after["nap"]["wake_at"] > before["nap"]["wake_at"]  # a 'for' sleep counts again from the restart
    assert after["approval"]["wake_at"] > before["approval"]["wake_at"]
    assert after["alarm"]["status"] == "completed"  # untouched: it had finished
    send_event("order-7", {"approved": "again"}, run_id=run_id)
    assert rows(database_url, run_id)["approval"]["context_delta"] == {"approved": "again"}


def test_restart_keeps_an_until_deadline_and_a_passed_one_fires_at_once(database_url, conn):
    run_id = queue_workflows.start_run(Workflow("u").sleep("alarm", until="2000-01-01T00:00:00+00:00").sleep("other", seconds=600), {})
    cancel_run(run_id)
    restart_run(run_id)
    assert rows(database_url, run_id)["alarm"]["wake_at"] == datetime(2000, 1, 1, tzinfo=UTC)
    tick(conn)
    assert states(database_url, run_id)["alarm"] == "completed"


def test_the_pacer_sleeps_until_the_earliest_deadline_on_a_virtual_clock():
    clock = [100.0]
    pacer = Pacer(30.0, now_fn=lambda: clock[0])
    assert pacer.wait() == 30.0  # nothing noted: the safety tick
    pacer.note(None)
    assert pacer.wait() == 30.0
    pacer.note(5.0)
    clock[0] += 2.0  # the step's own work took time: not waited twice
    assert pacer.wait() == 3.0
    clock[0] += 4.0
    assert pacer.wait() == 0.0  # overdue: at once
    pacer.note(-3.0)
    assert pacer.wait() == 0.0
    pacer.note(3600.0)
    assert pacer.wait() == 30.0  # never past the tick


def db_now(url: str) -> datetime:
    return query(url, "SELECT clock_timestamp() AS t")[0]["t"]


@pytest.mark.multiprocess
@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_a_sleep_outlives_kill_9_of_the_orchestrator_and_a_deadline_missed_while_all_was_down_fires_at_once(database_url, procs):
    env = service_env(database_url)
    first = procs.orchestrator(env)
    wait_for_log(first, "orchestrator running", timeout=30)
    wf = (Workflow("durable").sleep("soon", seconds=4).sleep("later", seconds=6)
          .node("after", f"{N}:echo", deps=["soon", "later"], inputs={"v": {"$from": "later.slept_until"}}))
    run_id = queue_workflows.start_run(wf, {})
    wake = {name: r["wake_at"] for name, r in rows(database_url, run_id).items()}
    first.kill()  # -9 while both sleep
    second = procs.orchestrator(env)
    wait_for_log(second, "orchestrator running", timeout=30)
    assert db_now(database_url) < wake["soon"], f"the new orchestrator led too late to time the wake-up\n{procs.logs()}"
    soon = wait_until(lambda: (r := rows(database_url, run_id)["soon"])["status"] == "completed" and r, timeout=10,
                      what=f"'soon' to wake\n{procs.logs()}")
    assert timedelta(0) <= soon["finished_at"] - wake["soon"] < timedelta(milliseconds=500)
    second.kill()  # -9 again: nothing runs while 'later' comes due
    wait_until(lambda: db_now(database_url) > wake["later"] + timedelta(seconds=1), timeout=10, what="'later' to come due")
    assert states(database_url, run_id)["later"] == "waiting"
    third = procs.orchestrator(env)
    wait_for_log(third, "orchestrator running", timeout=30)
    leading = db_now(database_url)
    later = wait_until(lambda: (r := rows(database_url, run_id)["later"])["status"] == "completed" and r, timeout=10,
                       what=f"'later' to fire\n{procs.logs()}")
    assert later["finished_at"] - leading < timedelta(seconds=1)  # at once, not a tick later
    wait_workers_ready(database_url, [procs.worker(env, "cpu")])
    status = wait_until(lambda: (s := queue_workflows.run_status(run_id))["status"] == "completed" and s, timeout=15,
                        what=f"the run to finish\n{procs.logs()}")
    assert status["nodes"]["after"]["output"]["echo"]["v"] == later["context_delta"]["slept_until"]
