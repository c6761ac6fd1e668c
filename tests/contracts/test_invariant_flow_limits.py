"""Contract 10 in the claim itself: a key's running count never passes its limit, a blocked key
never blocks the keys behind it, a job without a token is not claimed and is charged nothing,
every way out of 'running' frees the slot, and limits change at run time (docs/flow_control.md)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from procs import query, wait_until
from psycopg.rows import dict_row

from queue_workflows import InvalidNameError, InvalidPayloadError, node_queue, register_ingest_task
from queue_workflows.bulk import copy_ingest_jobs
from queue_workflows.jobstore import Claimant
from queue_workflows.ops.flow import clear_flow_limit, flow_keys, flow_summary, parse_rate, set_flow_limit
from queue_workflows.worker.batch.worker import claim_batch_query


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("noop", lambda reason: {})
    register_ingest_task("other", lambda reason: {})


def _enqueue(basin: str | None = None, *, key: str | None = None, task: str = "noop", n: int = 1) -> list[int]:
    return [node_queue.enqueue_ingest_job(task, "fetch", {"basin": basin} if basin else {}, concurrency_key=key)["id"] for _ in range(n)]


def _claim(worker: str = "w") -> dict | None:
    return node_queue.claim_ingest_job("fetch", Claimant(worker, 1))


def _running(url: str) -> dict[str | None, int]:
    rows = query(url, "SELECT flow_key, count(*) AS n FROM ingest_jobs WHERE status = 'running' GROUP BY 1")
    return {r["flow_key"]: r["n"] for r in rows}


def test_a_full_key_is_skipped_not_waited_on_and_charges_no_attempt(database_url):
    set_flow_limit("fetch", max_running=1, key_path="args.basin")
    a1, a2 = _enqueue("a", n=2)
    (b1,) = _enqueue("b")
    assert _claim()["id"] == a1
    assert _claim()["id"] == b1, "the claim stopped at a's second job instead of skipping to b"
    assert _claim() is None, "a's second job ran beside its first, over max_running 1"
    row = query(database_url, "SELECT status, attempts FROM ingest_jobs WHERE id = %s", (a2,))[0]
    assert row == {"status": "queued", "attempts": 0}
    assert _running(database_url) == {"a": 1, "b": 1}


def test_an_explicit_key_wins_over_the_path_and_an_unkeyed_job_shares_the_empty_key(database_url):
    set_flow_limit("fetch", max_running=1, key_path="args.basin")
    (x,) = _enqueue("a", key="x")
    (a,) = _enqueue("a")
    (n1, n2) = _enqueue(n=2)
    claimed = {_claim()["id"] for _ in range(3)}
    assert claimed == {x, a, n1} and _claim() is None
    assert _running(database_url) == {"x": 1, "a": 1, "": 1}
    assert query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (n2,))[0]["status"] == "queued"


@pytest.mark.parametrize("way_out", [
    "UPDATE ingest_jobs SET status = 'queued', claimed_by = NULL WHERE id = %(id)s",  # reclaim, hand-back, watchdog requeue
    "UPDATE ingest_jobs SET status = 'completed', finished_at = now() WHERE id = %(id)s",
    "UPDATE ingest_jobs SET status = 'cancelled', finished_at = now() WHERE id = %(id)s",  # a hard cancel
    "DELETE FROM ingest_jobs WHERE id = %(id)s",
])
def test_every_way_out_of_running_frees_the_slot_once(database_url, way_out):
    set_flow_limit("fetch", max_running=1, key_path="args.basin")
    first, second, third = _enqueue("a", n=3)
    assert _claim()["id"] == first and _claim() is None
    query(database_url, way_out, {"id": first})
    got = _claim()
    assert got is not None and got["id"] in (first, second), f"{way_out!r} did not free a's slot"
    assert _claim() is None, f"{way_out!r} freed more than one slot"
    assert _running(database_url) == {"a": 1}
    assert query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (third,))[0]["status"] == "queued"


def test_a_limit_changed_with_plain_sql_holds_from_the_next_claim(database_url):
    set_flow_limit("fetch", max_running=1)  # no key path: one slot for the whole queue
    ids = _enqueue(n=4)
    assert _claim()["id"] == ids[0] and _claim() is None
    query(database_url, "UPDATE flow_limits SET max_running = 3 WHERE queue = 'fetch'")
    assert [_claim()["id"] for _ in range(2)] == ids[1:3] and _claim() is None
    query(database_url, "UPDATE flow_limits SET max_running = 0 WHERE queue = 'fetch'")  # hold everything
    query(database_url, "UPDATE ingest_jobs SET status = 'completed' WHERE status = 'running'")
    assert _claim() is None
    assert clear_flow_limit("fetch") and not clear_flow_limit("fetch")
    assert _claim()["id"] == ids[3]


def test_a_task_limit_wins_over_the_queue_limit_and_other_tasks_are_free(database_url):
    set_flow_limit("fetch", max_running=5)
    set_flow_limit("fetch", task="other", max_running=1)
    o1, o2 = _enqueue(task="other", n=2)
    noops = _enqueue(n=3)
    claimed = [(_claim() or {}).get("id") for _ in range(6)]
    assert o1 in claimed and o2 not in claimed and set(noops) <= set(claimed)


def test_a_job_without_a_token_waits_uncharged_and_the_bucket_refills(database_url):
    set_flow_limit("fetch", rate="2/s", key_path="args.basin")
    ids = _enqueue("a", n=3)
    (b,) = _enqueue("b")
    assert [_claim()["id"] for _ in range(3)] == [ids[0], ids[1], b], "b has its own bucket"
    assert _claim() is None
    assert query(database_url, "SELECT attempts FROM ingest_jobs WHERE id = %s", (ids[2],))[0]["attempts"] == 0
    got = wait_until(_claim, timeout=3, interval=0.05, what="a token to come back")
    assert got["id"] == ids[2]
    keys = {(k["key"]): k for k in flow_keys()}
    assert keys["a"]["running"] == 3 and keys["a"]["tokens"] < 1 and keys["a"]["rate_count"] == 2
    assert flow_summary()[0]["queue"] == "fetch"


def test_a_batch_takes_at_most_the_free_slots(database_url, conn):
    set_flow_limit("fetch", max_running=3, key_path="args.basin")
    _enqueue("a", n=10)
    _enqueue("b", n=2)
    params = {"queue": "fetch", "worker_id": "batch", "lock_key": 1, "lease_seconds": 60, "limit": 10, "aging_seconds": 0}

    def batch() -> int:
        with conn.transaction():
            return len(conn.execute(claim_batch_query("ingest_jobs", "highest_first"), params).fetchall())

    # The batch's first 10 rows in claim order are all a's: 3 are admitted, the rest stay queued uncharged.
    assert batch() == 3 and _running(database_url) == {"a": 3}
    assert batch() == 2 and _running(database_url) == {"a": 3, "b": 2}, "the next batch skips the full key"
    assert batch() == 0
    assert query(database_url, "SELECT sum(attempts) AS n FROM ingest_jobs WHERE status = 'queued'")[0]["n"] == 0


def test_concurrent_claims_on_one_key_never_pass_its_limit(database_url):
    set_flow_limit("fetch", max_running=2, key_path="args.basin")
    _enqueue("a", n=40)
    got: list[int] = []
    start = threading.Barrier(8)

    def claimer(i: int) -> None:
        with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as own:
            start.wait()
            for _ in range(5):
                row = node_queue.claim_ingest_job("fetch", Claimant(f"t{i}", 1), conn=own)
                if row is not None:
                    got.append(row["id"])

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2, f"8 racing claimers took {len(got)} jobs of a key limited to 2"


def test_node_jobs_and_dag_nodes_carry_their_key_and_are_limited(database_url):
    import queue_workflows
    from queue_workflows.dag import Workflow

    set_flow_limit("cpu", max_running=1)
    first = node_queue.enqueue_node_job("n1", "cpu", node_module="qw_test_nodes", concurrency_key="m", check_callable=False)
    second = node_queue.enqueue_node_job("n2", "cpu", node_module="qw_test_nodes", concurrency_key="m", check_callable=False)
    wf = Workflow("keyed").node("step", "qw_test_nodes", concurrency_key="m")
    run_id = queue_workflows.start_run(wf, {})
    assert Workflow.from_dict(wf.to_dict()).nodes[0].concurrency_key == "m"
    assert node_queue.claim_node_job("cpu", Claimant("w", 1))["id"] == first["id"]
    assert node_queue.claim_node_job("cpu", Claimant("w", 1)) is None
    assert second["concurrency_key"] == "m"
    node = wait_until(lambda: query(database_url, "SELECT concurrency_key FROM workflow_node_jobs WHERE run_id = %s", (run_id,)),
                      timeout=5, what="the run's first node")
    assert node == [{"concurrency_key": "m"}]


def test_bulk_and_copy_carry_keys(database_url):
    node_queue.enqueue_ingest_jobs([{"task_name": "noop", "queue": "fetch", "concurrency_key": "k1"}, {"task_name": "noop", "queue": "fetch"}])
    assert copy_ingest_jobs([{"task_name": "noop", "queue": "fetch", "concurrency_key": "k2"}, {"task_name": "noop", "queue": "fetch"}]) == 2
    keys = [r["concurrency_key"] for r in query(database_url, "SELECT concurrency_key FROM ingest_jobs ORDER BY id")]
    assert keys == ["k1", None, "k2", None]


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"max_running": -1}, InvalidPayloadError, "max_running must be a whole number 0 or more, not -1"),
    ({"max_running": True}, InvalidPayloadError, "max_running"),
    ({"rate": "0/s"}, InvalidPayloadError, "at least 1 token"),
    ({"rate": "5/0s"}, InvalidPayloadError, "more than 0"),
    ({"rate": "fast"}, InvalidPayloadError, "'N/interval'"),
    ({"max_running": 1, "key_path": "basin"}, InvalidPayloadError, "key_path 'basin'"),
    ({}, InvalidPayloadError, "give max_running, a rate, or both"),
    ({"max_running": 1, "task": "bad name"}, InvalidNameError, "task 'bad name'"),
])
def test_a_bad_limit_is_refused_naming_it_and_changes_nothing(database_url, kwargs, error, words):
    set_flow_limit("fetch", max_running=2, task="noop")
    with pytest.raises(error, match=words) as info:
        set_flow_limit("fetch", **{"task": "noop", **kwargs})
    assert "queue 'fetch'" in str(info.value)
    assert query(database_url, "SELECT task, max_running, rate_count FROM flow_limits") == [{"task": "noop", "max_running": 2, "rate_count": None}]


def test_plain_sql_cannot_store_a_bad_limit(database_url):
    for bad in ("INSERT INTO flow_limits (queue, max_running) VALUES ('fetch', -1)",
                "INSERT INTO flow_limits (queue, rate_count) VALUES ('fetch', 5)",
                "INSERT INTO flow_limits (queue) VALUES ('fetch')",
                "INSERT INTO flow_limits (queue, max_running, key_path) VALUES ('fetch', 1, 'basin')"):
        with pytest.raises(psycopg.errors.CheckViolation):
            query(database_url, bad)
    assert query(database_url, "SELECT count(*) AS n FROM flow_limits")[0]["n"] == 0


def test_parse_rate():
    assert parse_rate("10/s") == (10, 1.0)
    assert parse_rate("600/min") == (600, 60.0)
    assert parse_rate("5 / 2.5s") == (5, 2.5)
    assert parse_rate("3/250ms") == (3, 0.25)


def test_a_worker_role_admits_jobs_but_cannot_change_limits(database_url, worker_url):
    set_flow_limit("fetch", max_running=1, rate="5/s")
    (job,) = _enqueue()
    with psycopg.connect(worker_url, autocommit=True, row_factory=dict_row) as worker:
        assert node_queue.claim_ingest_job("fetch", Claimant("w", 1), conn=worker)["id"] == job
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute("UPDATE flow_limits SET max_running = 9")


def test_a_claim_waits_for_an_uncommitted_admission_of_its_key_then_counts_it(database_url):
    set_flow_limit("fetch", max_running=1, key_path="args.basin")
    (warm,) = _enqueue("a")
    assert _claim()["id"] == warm  # the key's flow_keys row now exists: no insert to wait on below
    query(database_url, "UPDATE ingest_jobs SET status = 'completed' WHERE id = %s", (warm,))
    _enqueue("a", n=2)
    result: list[dict | None] = []
    with psycopg.connect(database_url, row_factory=dict_row) as first, psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as second:
        assert node_queue.claim_ingest_job("fetch", Claimant("first", 1), conn=first) is not None  # admitted, not committed
        thread = threading.Thread(target=lambda: result.append(node_queue.claim_ingest_job("fetch", Claimant("second", 1), conn=second)))
        thread.start()
        wait_until(lambda: query(database_url, "SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                                               "WHERE NOT l.granted AND a.datname = current_database()")[0]["n"] > 0,
                   timeout=5, what="the second claim to wait for the key's turn")
        first.commit()
        thread.join(timeout=10)
    assert result == [None], "the second claim admitted a job beside the first's uncommitted one"
    assert _running(database_url) == {"a": 1}


def test_a_gpu_claim_admits_by_key_too(database_url):
    set_flow_limit("gpu", max_running=1)
    first, second = (node_queue.enqueue_node_job(f"g{i}", "gpu", node_module="qw_test_nodes", required_model="m-a",
                                                 concurrency_key="k", check_callable=False) for i in range(2))
    other = node_queue.enqueue_node_job("g3", "gpu", node_module="qw_test_nodes", required_model="m-b", concurrency_key="j", check_callable=False)
    claimed = [node_queue.claim_node_job("gpu", Claimant("gw", 1), current_model="m-a") for _ in range(3)]
    assert [c["id"] if c else None for c in claimed] == [first["id"], other["id"], None]
    assert query(database_url, "SELECT status, attempts FROM workflow_node_jobs WHERE id = %s", (second["id"],)) == [{"status": "queued", "attempts": 0}]


def test_a_freed_slot_wakes_the_queue_and_an_unlimited_job_does_not(database_url):
    set_flow_limit("fetch", task="other", max_running=1)
    (limited,) = _enqueue(task="other")
    (free,) = _enqueue()
    assert {_claim()["id"], _claim()["id"]} == {limited, free}
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN qw_ready_fetch")
        query(database_url, "UPDATE ingest_jobs SET status = 'completed' WHERE id = %s", (free,))
        assert [n.channel for n in listener.notifies(timeout=0.5, stop_after=1)] == [], "a job under no limit woke the queue"
        query(database_url, "UPDATE ingest_jobs SET status = 'completed' WHERE id = %s", (limited,))
        assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == ["fetch"], "a freed slot did not wake the queue"
