"""Contract 2: claim is one statement; ordering comes only from fixed fragments; no double claim."""

from __future__ import annotations

import threading

import pytest
from psycopg import sql

import queue_workflows
from queue_workflows import db, node_queue, queries, register_ingest_task
from queue_workflows.common import sqlfile
from queue_workflows.errors import ConfigError
from queue_workflows.jobstore import Claimant

_GPU = sqlfile.load("queue_workflows.gpu", "claim.sql")

WORKER = Claimant("test-worker", 1)


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason: {})


def claim_all(queue: str, **kw) -> list[int]:
    ids = []
    while (job := node_queue.claim_ingest_job(queue, WORKER, **kw)) is not None:
        ids.append(job["id"])
    return ids


def test_claim_takes_highest_priority_then_oldest(database_url):
    low = node_queue.enqueue_ingest_job("t", "fetch", priority=0)["id"]
    high_old = node_queue.enqueue_ingest_job("t", "fetch", priority=5)["id"]
    high_new = node_queue.enqueue_ingest_job("t", "fetch", priority=5)["id"]
    other_queue = node_queue.enqueue_ingest_job("t", "load", priority=99)["id"]
    assert claim_all("fetch") == [high_old, high_new, low]
    assert claim_all("load") == [other_queue]


def test_lowest_first_hosts_take_the_least_urgent_work(database_url):
    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), claim_order="lowest_first")
    urgent = node_queue.enqueue_ingest_job("t", "fetch", priority=9)["id"]
    routine = node_queue.enqueue_ingest_job("t", "fetch", priority=1)["id"]
    assert claim_all("fetch") == [routine, urgent]


def test_gpu_claim_prefers_the_warm_model_within_a_priority(database_url):
    cold = node_queue.enqueue_node_job("a", "gpu", node_module="qw_test_nodes", required_model="llama")["id"]
    warm = node_queue.enqueue_node_job("b", "gpu", node_module="qw_test_nodes", required_model="wan")["id"]
    urgent_cold = node_queue.enqueue_node_job("c", "gpu", node_module="qw_test_nodes", required_model="sdxl", priority=3)["id"]
    order = []
    while (job := node_queue.claim_node_job("gpu", WORKER, current_model="wan")) is not None:
        order.append(job["id"])
    assert order == [urgent_cold, warm, cold]


def test_gpu_claim_without_a_loaded_model_prefers_model_free_jobs(database_url):
    needs_model = node_queue.enqueue_node_job("a", "gpu", node_module="qw_test_nodes", required_model="llama")["id"]
    model_free = node_queue.enqueue_node_job("b", "gpu", node_module="qw_test_nodes")["id"]
    assert node_queue.claim_node_job("gpu", WORKER, current_model=None)["id"] == model_free
    assert node_queue.claim_node_job("gpu", WORKER, current_model=None)["id"] == needs_model


def test_claim_stamps_the_claimant_lease_and_attempt(database_url):
    node_queue.enqueue_ingest_job("t", "fetch")
    job = node_queue.claim_ingest_job("fetch", Claimant("w-1", 42))
    assert (job["status"], job["claimed_by"], job["claim_lock_key"], job["attempts"]) == ("running", "w-1", 42, 1)
    assert job["lease_expires_at"] > job["started_at"]


def test_order_by_is_built_only_from_fixed_fragments(database_url):
    for order in ("highest_first", "lowest_first"):
        for affinity in (True, False):
            text = queries.claim_query("ingest_jobs", order, affinity).as_string(None)
            # The gpu plan and reservation, the fair order and a tenant's bands are fixed fragments of their own, the only other places that order.
            for part in ("fair", "bands"):
                fragment = queries.fair_fragments("ingest_jobs", order)[part].as_string(None)
                assert fragment in text
                text = text.replace(fragment, "")
            if affinity:
                plan = sql.SQL(_GPU["gpu_claim_plan"]).format(table=sql.Identifier("ingest_jobs"), table_all=sql.Identifier("ingest_jobs_all"),
                                                                     head_order=queries.HEAD_ORDER[order]).as_string(None)
                assert text.startswith("WITH RECURSIVE " + plan)
                text = text[len("WITH RECURSIVE " + plan):]
                assert _GPU["gpu_reserve"] in text  # the VRAM reservation's device pick, a fixed fragment too
                text = text.replace(_GPU["gpu_reserve"], "")
            assert text.count("ORDER BY") == 1
            order_by = text.split("ORDER BY", 1)[1].split("FOR UPDATE", 1)[0]
            allowed = {"priority", "DESC", "ASC", "id", "(required_model", "IS", "NOT", "DISTINCT", "FROM", "%(current_model)s)", ",",
                       "coalesce(required_model", "=", "ANY(%(loaded_models)s::text[])", "false)",
                       "ANY((SELECT", "p.sole", "p.ranked", "plan", "AS", "p)::text[])", "p)", "array_position((SELECT", "required_model)",
                       "NULLS", "FIRST"}
            assert set(order_by.replace(",", " , ").split()) <= allowed, order_by
    with pytest.raises(ValueError):
        queries.claim_query("ingest_jobs", "priority; DROP TABLE ingest_jobs", False)
    with pytest.raises(ConfigError, match="QW_CLAIM_ORDER"):
        queue_workflows.configure(database_url=database_url, claim_order="id; DROP TABLE ingest_jobs --")


def test_claim_is_a_single_update_with_skip_locked():
    for affinity in (False, True):  # a gpu claim's plan and the fair order are WITH clauses of the same statement
        text = queries.claim_query("workflow_node_jobs", "highest_first", affinity).as_string(None)
        assert text.lstrip().startswith("WITH RECURSIVE queued_models AS (" if affinity else "WITH RECURSIVE queued_tenants AS (") and text.count(";") == 0
        assert "FOR UPDATE SKIP LOCKED" in text and "LIMIT 1" in text and text.count('UPDATE "workflow_node_jobs" AS j') == 1


def test_concurrent_claimers_never_claim_the_same_job(database_url):
    total, claimers = 300, 8
    with db.connect(url=database_url) as c, c.transaction():
        for i in range(total):
            node_queue.enqueue_ingest_job("t", "beta", {"i": i}, conn=c)
    claimed: list[list[int]] = [[] for _ in range(claimers)]
    start = threading.Barrier(claimers)

    def claimer(slot: int) -> None:
        with db.connect(autocommit=True, url=database_url) as own:
            start.wait()
            while (job := node_queue.claim_ingest_job("beta", Claimant(f"w{slot}", slot + 1), conn=own)) is not None:
                claimed[slot].append(job["id"])

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    every = [job_id for ids in claimed for job_id in ids]
    assert len(every) == len(set(every)) == total
    assert sum(1 for ids in claimed if ids) > 1, "claims were not actually concurrent"
    with db.connect(url=database_url) as c:
        rows = c.execute("SELECT claimed_by, attempts FROM ingest_jobs").fetchall()
    assert all(r["attempts"] == 1 for r in rows)
    by_worker = {f"w{slot}": len(ids) for slot, ids in enumerate(claimed)}
    assert {w: sum(1 for r in rows if r["claimed_by"] == w) for w in by_worker} == by_worker
