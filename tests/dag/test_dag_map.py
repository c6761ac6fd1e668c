"""Map nodes in process: expansion, order, the max_parallel window, retries, failures and validation, on a real Postgres."""

from __future__ import annotations

import pytest
from procs import query

import queue_workflows
from queue_workflows import node_queue, testing
from queue_workflows.dag import Workflow, WorkflowValidationError
from queue_workflows.dag.outbox import DispatchDrain

M = "qw_map_nodes"


def items(url, run_id, map_node="m"):
    return query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND map_node = %s ORDER BY map_index", (run_id, map_node))


def node(url, run_id, name):
    return query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND node_name = %s", (run_id, name))[0]


def drain(conn):
    while DispatchDrain().drain_once(conn):
        pass


def work(url, conn, run_id, *, limit=None):
    """Stand in for the workers: drain, run up to `limit` queued rows of the run (items first, in order), drain."""
    drain(conn)
    rows = query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND status = 'queued' ORDER BY map_index NULLS LAST, id", (run_id,))
    for row in rows[:limit]:
        outcome = testing.run_node_row(row)
        if outcome.status == "completed":
            node_queue.mark_completed(row["id"], outcome.result.obj, conn=conn)
        else:
            node_queue.mark_failed(row["id"], outcome.error or "", conn=conn)
    drain(conn)
    return len(rows[:limit])


def run_to_end(url, conn, run_id, *, limit=None, live_bound=None):
    for _ in range(10_000):
        if live_bound is not None:
            live = query(url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE run_id = %s AND map_node IS NOT NULL"
                              " AND status IN ('scheduled', 'queued', 'running')", (run_id,))[0]["n"]
            assert live <= live_bound, f"{live} live items, max_parallel {live_bound}"
        if not work(url, conn, run_id, limit=limit):
            break
    return queue_workflows.run_status(run_id)


def fan(n=5, **map_kw):
    return (Workflow("fan").node("src", f"{M}:ids", inputs={"n": n})
            .map("m", f"{M}:square", deps=["src"], over={"$from": "src.ids"}, inputs={"offset": 1}, **map_kw)
            .node("sum", f"{M}:total", deps=["m"], inputs={"items": {"$from": "m.items"}}))


def test_a_map_runs_once_per_item_and_the_fan_in_gets_the_outputs_in_item_order(database_url, conn):
    run_id = queue_workflows.start_run(fan(12), {})
    work(database_url, conn, run_id)  # src
    assert node(database_url, run_id, "m")["status"] == "waiting"
    assert [r["node_name"] for r in items(database_url, run_id)] == [f"m[{i}]" for i in range(12)]
    assert items(database_url, run_id)[3]["inputs"] == {"item": 3, "offset": 1}
    # finish the items in reverse order: the output is still in item order
    rows = items(database_url, run_id)
    for row in reversed(rows):
        node_queue.mark_completed(row["id"], testing.run_node_row(row).result.obj, conn=conn)
        drain(conn)
    status = run_to_end(database_url, conn, run_id)
    assert status["status"] == "completed"
    assert [i["sq"] for i in status["nodes"]["m"]["output"]["items"]] == [i * i + 1 for i in range(12)]
    assert status["nodes"]["sum"]["output"] == {"sum": sum(i * i + 1 for i in range(12)), "n": 12}
    assert set(status["nodes"]) == {"src", "m", "sum"}  # items are never listed as nodes
    assert "sq" not in status["context"]  # nor merged into the run's scope
    assert status["nodes"]["m"]["map"] == {"total": 12, "done": 12, "running": 0, "failed": 0, "queued": 0}


def test_an_empty_list_completes_the_map_at_once(database_url, conn):
    wf = Workflow("empty").map("m", f"{M}:square", over=[]).node("sum", f"{M}:total", deps=["m"], inputs={"items": {"$from": "m.items"}})
    run_id = queue_workflows.start_run(wf, {})
    assert node(database_url, run_id, "m")["status"] == "completed"
    assert node(database_url, run_id, "m")["context_delta"] == {"items": []}
    status = run_to_end(database_url, conn, run_id)
    assert status["status"] == "completed" and status["nodes"]["sum"]["output"] == {"sum": 0, "n": 0}
    assert items(database_url, run_id) == []


def test_max_parallel_is_never_exceeded(database_url, conn):
    run_id = queue_workflows.start_run(fan(23, max_parallel=4), {})
    work(database_url, conn, run_id)  # src
    assert len(items(database_url, run_id)) == 4
    status = run_to_end(database_url, conn, run_id, limit=3, live_bound=4)  # 3 at a time: the window refills by steps
    assert status["status"] == "completed"
    assert [i["sq"] for i in status["nodes"]["m"]["output"]["items"]] == [i * i + 1 for i in range(23)]


def test_literal_and_context_lists_and_a_default(database_url, conn):
    wf = (Workflow("sources").map("lit", f"{M}:square", over=[2, 3], item_input="item")
          .map("ctx", f"{M}:square", over={"$from": "context.xs"})
          .map("dflt", f"{M}:square", over={"$from": "context.missing", "default": [7]}))
    run_id = queue_workflows.start_run(wf, {"xs": [4]})
    status = run_to_end(database_url, conn, run_id)
    assert status["status"] == "completed"
    assert [[i["sq"] for i in status["nodes"][m]["output"]["items"]] for m in ("lit", "ctx", "dflt")] == [[4, 9], [16], [49]]


def test_a_failed_item_fails_the_map_and_the_run_and_cancels_the_items_not_started(database_url, conn):
    wf = Workflow("fails").map("m", f"{M}:fail_on", over=list(range(10)), inputs={"bad": 1}, max_parallel=3, max_attempts=1)
    run_id = queue_workflows.start_run(wf, {})
    work(database_url, conn, run_id, limit=2)  # item 0 completes, item 1 fails for good
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "failed" and status["error"] == "node 'm' failed"
    assert status["nodes"]["m"]["error"].startswith("map 'm': item 1 failed: ") and "item 1 is bad" in status["nodes"]["m"]["error"]
    assert [r["status"] for r in items(database_url, run_id)] == ["completed", "failed", "cancelled"]  # 3..9 never created
    assert status["nodes"]["m"]["map"] == {"total": 10, "done": 1, "running": 0, "failed": 2, "queued": 7}


def test_allow_failures_completes_the_map_listing_the_failures(database_url, conn):
    wf = Workflow("lenient").map("m", f"{M}:fail_on", over=[0, 1, 2], inputs={"bad": 1}, allow_failures=True, max_attempts=1)
    run_id = queue_workflows.start_run(wf, {})
    status = run_to_end(database_url, conn, run_id)
    assert status["status"] == "completed"
    out = status["nodes"]["m"]["output"]
    assert out["items"] == [{"item": 0}, None, {"item": 2}]
    assert [f["index"] for f in out["failed"]] == [1] and "item 1 is bad" in out["failed"][0]["error"]


def test_a_gpu_map_puts_its_items_on_the_gpu_queue_with_the_model(database_url, conn):
    wf = Workflow("gpu").map("m", f"{M}:square", over=[1, 2], queue="gpu", model="bge-small", max_attempts=4, budget_seconds=30)
    run_id = queue_workflows.start_run(wf, {})
    rows = items(database_url, run_id)
    assert [(r["queue"], r["required_model"], r["max_attempts"], r["budget_seconds"], r["status"]) for r in rows] == [
        ("gpu", "bge-small", 4, 30.0, "queued")] * 2
    assert node(database_url, run_id, "m")["status"] == "waiting"  # the map's own row is never claimed


def test_over_that_is_not_a_list_at_run_time_fails_the_map_with_a_clear_error(database_url, conn):
    wf = Workflow("bad").node("src", f"{M}:ids").map("m", f"{M}:square", deps=["src"], over={"$from": "src.not_a_list"})
    run_id = queue_workflows.start_run(wf, {})
    status = run_to_end(database_url, conn, run_id)
    assert status["status"] == "failed"
    assert status["nodes"]["m"]["error"] == "map 'm': over {'$from': 'src.not_a_list'} is a JSON object, not a list"
    missing = Workflow("gone").node("src", f"{M}:ids").map("m", f"{M}:square", deps=["src"], over={"$from": "src.nope"})
    status = run_to_end(database_url, conn, queue_workflows.start_run(missing, {}))
    assert status["nodes"]["m"]["error"] == "map 'm': over {'$from': 'src.nope'} has no value"


@pytest.mark.parametrize(("over", "kw", "message"), [
    ({"$from": "other.ids"}, {}, "over: $from 'other.ids' must start with 'context' or a node 'm' depends on, not 'other'"),
    ({"$from": "src"}, {}, "over: $from must be a dotted path to a list such as 'node.key'"),
    ("1,2,3", {}, "over must be a list, or {'$from': 'node.key'}"),
    ({"$from": "src.ids", "x": 1}, {}, "over must be a list"),
    ({"$from": "src.ids", "default": 3}, {}, "over: default must be a list"),
    ([1], {"max_parallel": 0}, "max_parallel must be an integer 1..1000000 or None, not 0"),
    ([1], {"max_parallel": True}, "max_parallel must be an integer"),
    ([1], {"item_input": "not an id"}, "item_input must be a parameter name"),
    ([1], {"item_input": "offset"}, "item_input 'offset' is also one of its inputs"),
    ([1], {"allow_failures": "yes"}, "allow_failures must be true or false"),
    ({"$from": "src.i\x00ds"}, {}, "over[\"$from\"] contains a NUL character"),
])
def test_a_malformed_map_is_refused_naming_the_node_and_key_and_writes_nothing(database_url, over, kw, message):
    wf = (Workflow("w").node("src", f"{M}:ids").node("other", f"{M}:ids")
          .map("m", f"{M}:square", deps=["src"], over=over, inputs={"offset": 1}, **kw))
    with pytest.raises(WorkflowValidationError, match="node 'm'") as err:
        queue_workflows.start_run(wf, {})
    assert message in str(err.value)
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 0}]


def test_the_data_form_takes_the_map_keys_only_on_a_map(database_url):
    data = {"name": "d", "nodes": [{"id": "m", "call": f"{M}:square", "kind": "map", "over": [1], "max_parallel": 2,
                                    "item_input": "item", "allow_failures": True}]}
    wf = Workflow.from_dict(data)
    assert Workflow.from_dict(wf.to_dict()).to_dict() == wf.to_dict()
    assert wf.nodes[0].max_parallel == 2 and wf.nodes[0].allow_failures is True
    with pytest.raises(WorkflowValidationError, match="node 't': over only apply to a map node"):
        Workflow.from_dict({"name": "d", "nodes": [{"id": "t", "call": f"{M}:square", "over": [1]}]})


def test_cancel_then_restart_keeps_completed_items_and_runs_the_rest_within_the_window(database_url, conn, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)  # the items record their executions
    wf = (Workflow("again").map("m", f"{M}:square", over=list(range(6)), inputs={"record": True}, max_parallel=2)
          .node("sum", f"{M}:total", deps=["m"], inputs={"items": {"$from": "m.items"}}))
    run_id = queue_workflows.start_run(wf, {})
    work(database_url, conn, run_id, limit=2)  # items 0 and 1 complete; 2 and 3 are queued
    before = {r["map_index"]: (r["id"], r["status"]) for r in items(database_url, run_id)}
    assert before == {0: (before[0][0], "completed"), 1: (before[1][0], "completed"), 2: (before[2][0], "queued"), 3: (before[3][0], "queued")}
    cancelled = queue_workflows.cancel_run(run_id)
    assert sorted(cancelled["cancelled"]) == ["m", "m[2]", "m[3]"]
    drain(conn)
    assert {r["map_index"]: r["status"] for r in items(database_url, run_id)} == {0: "completed", 1: "completed", 2: "cancelled", 3: "cancelled"}
    assert queue_workflows.run_status(run_id)["nodes"]["m"]["map"] == {"total": 6, "done": 2, "running": 0, "failed": 2, "queued": 2}
    restarted = queue_workflows.restart_run(run_id)
    assert sorted(restarted["reset"]) == ["m", "m[2]", "m[3]"]
    assert {r["map_index"]: r["status"] for r in items(database_url, run_id)} == {0: "completed", 1: "completed", 2: "queued", 3: "queued"}
    status = run_to_end(database_url, conn, run_id, limit=1, live_bound=2)
    assert status["status"] == "completed"
    assert [i["sq"] for i in status["nodes"]["m"]["output"]["items"]] == [i * i for i in range(6)]
    after = {r["map_index"]: r["id"] for r in items(database_url, run_id)}
    assert after[0] == before[0][0] and after[2] == before[2][0]  # rows reused, never duplicated
    ran = sorted(r["token"] for r in query(database_url, "SELECT token FROM test_executions"))
    assert ran == sorted(f"item:{i}" for i in range(6))  # completed items never ran again


@pytest.mark.soak
def test_a_100000_item_map_expands_in_sql_and_stays_out_of_run_status(database_url, conn):
    n = 100_000
    wf = Workflow("wide").map("m", f"{M}:square", over={"$from": "context.ids"}, queue="gpu", model="unserved")
    run_id = queue_workflows.start_run(wf, {"ids": list(range(n))})  # a root map: start_run expands it, in its own transaction
    shape = query(database_url, "SELECT count(*) AS n, min(map_index) AS lo, max(map_index) AS hi, count(DISTINCT node_name) AS names,"
                                " max(inputs ->> 'item')::int AS last FROM workflow_node_jobs WHERE map_node = 'm'")[0]
    assert shape == {"n": n, "lo": 0, "hi": n - 1, "names": n, "last": n - 1}
    status = queue_workflows.run_status(run_id)
    assert list(status["nodes"]) == ["m"]
    assert status["nodes"]["m"]["map"] == {"total": n, "done": 0, "running": 0, "failed": 0, "queued": n}
    cancelled = queue_workflows.cancel_run(run_id)
    assert len(cancelled["cancelled"]) == n + 1
    drain(conn)
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE status <> 'cancelled'") == [{"n": 0}]


def test_a_gpu_map_runs_on_a_gpu_worker_with_its_model_loaded_once(database_url, conn):
    import threading

    import qw_demo.nodes as demo
    from queue_workflows.testing import wait_until
    from queue_workflows.worker.claim import ClaimWorker

    demo.register_models()  # what the gpu worker's registrar does at start
    wf = Workflow("embed").map("m", "qw_demo.nodes:embed", over=["queues", "maps", "gpus"], item_input="text", queue="gpu", model="demo-embed")
    run_id = queue_workflows.start_run(wf, {})
    worker, stop = ClaimWorker("gpu"), threading.Event()
    drain = threading.Thread(target=DispatchDrain().run_forever, args=(stop,), daemon=True)
    drain.start()
    try:
        def finished() -> bool:
            worker.drain()
            return queue_workflows.run_status(run_id)["status"] != "running"

        wait_until(finished, timeout=30, what="the gpu map")
    finally:
        stop.set()
        drain.join(timeout=5)
        worker.session.close()
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "completed" and [i["warm_model"] for i in status["nodes"]["m"]["output"]["items"]] == [True] * 3
    hits = [r["model_hit"] for r in query(database_url, "SELECT model_hit FROM workflow_node_jobs WHERE map_node = 'm' ORDER BY finished_at")]
    assert hits == [False, True, True]  # loaded for the first item, warm for the rest


def test_reconcile_moves_a_map_whose_last_item_event_was_lost(database_url, conn):
    from queue_workflows.dag.control import reconcile_runs

    wf = fan(3)
    run_id = queue_workflows.start_run(wf, {})
    work(database_url, conn, run_id)  # src; the 3 items are queued
    for row in items(database_url, run_id):
        node_queue.mark_completed(row["id"], testing.run_node_row(row).result.obj, conn=conn)
    query(database_url, "DELETE FROM workflow_dispatch_events WHERE processed_at IS NULL")  # lost, as by a hand-deleted row
    assert node(database_url, run_id, "m")["status"] == "waiting"
    assert reconcile_runs(conn) == [run_id]
    conn.commit()
    assert node(database_url, run_id, "m")["status"] == "completed"
    status = run_to_end(database_url, conn, run_id)
    assert status["status"] == "completed" and status["nodes"]["sum"]["output"]["n"] == 3
    assert reconcile_runs(conn) == []  # a map with live items, or a finished run, is left alone


def test_each_item_carries_the_maps_timeout_and_retry_policy(database_url, conn):
    wf = Workflow("policy").map("m", f"{M}:square", over=[1, 2, 3], timeout=30, retry_on=["OSError"],
                                retry_backoff={"base": 2, "max": 8})
    run_id = queue_workflows.start_run(wf, {})
    parent = node(database_url, run_id, "m")["retry_policy"]
    assert parent is not None and parent["retry_on"] == ["OSError"] and parent["timeout"] == 30
    assert [i["retry_policy"] for i in items(database_url, run_id)] == [parent] * 3


def test_each_item_carries_the_maps_concurrency_key(database_url, conn):
    wf = Workflow("keyed").map("m", f"{M}:square", over=[1, 2], concurrency_key="basin-7")
    run_id = queue_workflows.start_run(wf, {})
    assert node(database_url, run_id, "m")["concurrency_key"] == "basin-7"
    assert [i["concurrency_key"] for i in items(database_url, run_id)] == ["basin-7", "basin-7"]
