"""Weighted fair share across tenants: the claim's tenant order, weights at run time, aging, every enqueue path."""

from __future__ import annotations

import math
from collections import Counter

import psycopg
import pytest

import queue_workflows
from queue_workflows import bulk, node_queue, register_ingest_task
from queue_workflows.dag.definition import Workflow
from queue_workflows.dag.store import start_run
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.fair import tenants
from queue_workflows.fair.sweep import settle_tenants
from queue_workflows.jobstore import Claimant

WORKER = Claimant("w-fair", 7)


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason, args: args)


def _flood(tenant: str, n: int, *, queue: str = "fetch", priority: int = 0) -> None:
    bulk.copy_ingest_jobs({"task_name": "t", "queue": queue, "tenant": tenant, "priority": priority} for _ in range(n))


def _claim_tenants(n: int, queue: str = "fetch") -> list[str]:
    claimed = []
    for _ in range(n):
        job = node_queue.claim_ingest_job(queue, WORKER)
        assert job is not None, f"queue {queue} ran dry after {len(claimed)} claims"
        claimed.append(job["tenant"])
    return claimed


def test_every_enqueue_path_carries_the_tenant(conn):
    one = node_queue.enqueue_ingest_job("t", "fetch", tenant="acme")
    once = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="k1", tenant="acme.eu")
    many = node_queue.enqueue_ingest_jobs([{"task_name": "t", "queue": "fetch", "tenant": "b-2"}, {"task_name": "t", "queue": "load"}])
    bulk.copy_ingest_jobs([{"task_name": "t", "queue": "load", "tenant": "copy:1"}])
    node = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", tenant="nodes@x")
    run_id = start_run(Workflow("w").node("a", "qw_test_nodes"), tenant="runs", check_callables=False)
    assert [one["tenant"], once["tenant"], many[0]["tenant"], many[1]["tenant"], node["tenant"]] == ["acme", "acme.eu", "b-2", "default", "nodes@x"]
    assert conn.execute("SELECT tenant FROM ingest_jobs WHERE queue = 'load' AND tenant <> 'default'").fetchone()["tenant"] == "copy:1"
    run_rows = conn.execute("SELECT tenant FROM workflow_node_jobs WHERE run_id = %s", (run_id,)).fetchall()
    assert run_rows and {r["tenant"] for r in run_rows} == {"runs"}
    # A node job enqueued into a run takes the run's tenant, whatever it was given.
    into_run = node_queue.enqueue_node_job("m", "cpu", node_module="qw_test_nodes", run_id=run_id, tenant="other")
    assert into_run["tenant"] == "runs"


@pytest.mark.parametrize("bad", ["", " acme", "a" * 65, "x;drop", None, 7])
def test_a_bad_tenant_is_refused_on_every_path_and_writes_nothing(conn, bad):
    calls = [
        lambda: node_queue.enqueue_ingest_job("t", "fetch", tenant=bad),
        lambda: node_queue.enqueue_ingest_jobs([{"task_name": "t", "queue": "fetch"}, {"task_name": "t", "queue": "fetch", "tenant": bad}]),
        lambda: bulk.copy_ingest_jobs([{"task_name": "t", "queue": "fetch"}, {"task_name": "t", "queue": "fetch", "tenant": bad}]),
        lambda: node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes", tenant=bad),
        lambda: start_run(Workflow("w").node("a", "qw_test_nodes"), tenant=bad, check_callables=False),
    ]
    for call in calls:
        with pytest.raises(InvalidPayloadError, match="tenant .* is invalid"):
            call()
    counts = conn.execute("SELECT (SELECT count(*) FROM ingest_jobs) + (SELECT count(*) FROM workflow_node_jobs)"
                          " + (SELECT count(*) FROM workflow_runs) AS n").fetchone()
    assert counts["n"] == 0


def test_a_small_tenant_is_served_next_behind_a_large_backlog(conn):
    _flood("big", 3000, priority=5)  # higher priority too: fairness is across tenants, priority within one
    node_queue.claim_ingest_job("fetch", WORKER)
    small = node_queue.enqueue_ingest_job("t", "fetch", tenant="small")["id"]
    ids = [node_queue.claim_ingest_job("fetch", WORKER)["id"] for _ in range(2)]
    assert small in ids, "the small tenant's job waited behind the big tenant's backlog"


def test_served_shares_follow_the_weights(conn):
    tenants.set_tenant_weight("a", 3)
    tenants.set_tenant_weight("b", 1.5)
    for name in ("a", "b", "c"):
        _flood(name, 400)
    served = Counter(_claim_tenants(550))
    # Weights 3 : 1.5 : 1 of 550 claims: 300, 150, 100, each within one job (virtual-time order).
    assert abs(served["a"] - 300) <= 2 and abs(served["b"] - 150) <= 2 and abs(served["c"] - 100) <= 2, served
    shown = {(r["tenant"]): r for r in tenants.tenant_shares(queue="fetch")}
    assert shown["a"]["queued"] == 400 - served["a"] and shown["a"]["weight"] == 3
    assert math.isclose(float(shown["a"]["served_share"]), served["a"] / 550, abs_tol=0.01)
    assert math.isclose(float(shown["a"]["weight_share"]), 3 / 5.5, abs_tol=0.001)


def test_a_weight_changed_by_plain_sql_takes_effect_on_the_next_claim(conn):
    _flood("a", 300)
    _flood("b", 300)
    assert Counter(_claim_tenants(40)) == {"a": 20, "b": 20}
    conn.execute("INSERT INTO tenant_weights (tenant, weight) VALUES ('b', 4)")
    later = Counter(_claim_tenants(100))
    assert abs(later["b"] - 80) <= 2, later


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), 10_001, True, "2", None])
def test_a_bad_weight_is_refused_and_changes_nothing(conn, bad):
    tenants.set_tenant_weight("acme", 2)
    with pytest.raises(InvalidPayloadError, match="tenant 'acme': weight must be a number above 0 and at most 10000"):
        tenants.set_tenant_weight("acme", bad)
    if isinstance(bad, float | int) and not isinstance(bad, bool):
        with pytest.raises(psycopg.errors.CheckViolation, match="tenant_weights_weight_range"):
            conn.execute("UPDATE tenant_weights SET weight = %s WHERE tenant = 'acme'", (float(bad),))
    assert conn.execute("SELECT weight FROM tenant_weights WHERE tenant = 'acme'").fetchone()["weight"] == 2


def _active(conn) -> dict[str, bool]:
    return {r["tenant"]: r["active"] for r in conn.execute("SELECT tenant, active FROM tenant_shares WHERE queue = 'fetch'")}


def test_a_returning_tenant_starts_at_the_least_active_virtual_time(conn):
    for name in ("a", "b", "c"):
        _flood(name, 30 if name == "b" else 300)
    _claim_tenants(90)  # 30 each: b's queue is empty now
    assert settle_tenants(conn) == (1, 0) and _active(conn) == {"a": True, "b": False, "c": True}
    _claim_tenants(100)  # a and c alone: virtual time 80 each, b's stays at 30
    _flood("b", 300)
    run = Counter(_claim_tenants(60))
    # b comes back level with the least-served active tenant, so the three alternate; on its old
    # virtual time it would take the next 50 claims in a row.
    assert all(abs(run[name] - 20) <= 1 for name in "abc"), run


def test_the_sweep_idles_empty_tenants_and_revives_one_it_missed(conn):
    _flood("a", 3)
    _flood("b", 3)
    conn.execute("DELETE FROM ingest_jobs WHERE tenant = 'a'")
    assert settle_tenants(conn) == (1, 0) and _active(conn) == {"a": False, "b": True}
    # b idled by a pass that could not see its jobs being queued: the next pass revives it.
    conn.execute("UPDATE tenant_shares SET active = false WHERE tenant = 'b'")
    assert settle_tenants(conn) == (0, 1) and _active(conn)["b"] is True


def test_a_tenant_not_marked_active_still_has_its_work_claimed(conn):
    _flood("a", 2)
    _flood("b", 2)
    conn.execute("UPDATE tenant_shares SET active = false WHERE tenant = 'b'")  # as if the sweep had raced an enqueue
    assert sorted(_claim_tenants(4)) == ["a", "a", "b", "b"]  # a's first, then b's through the fallback walk


def test_a_job_queued_again_makes_its_tenant_active(conn):
    from queue_workflows.ops import admin

    job = node_queue.enqueue_ingest_job("t", "fetch", tenant="a")
    node_queue.claim_ingest_job("fetch", WORKER)
    conn.execute("UPDATE ingest_jobs SET status = 'failed', finished_at = now() WHERE id = %s", (job["id"],))
    settle_tenants(conn)
    assert _active(conn) == {"a": False}
    admin.retry_job(f"ingest:{job['id']}")
    assert _active(conn) == {"a": True}


def test_a_lone_tenant_charges_nothing(conn):
    _flood("solo", 50)
    _claim_tenants(50)
    assert conn.execute("SELECT tenant, vtime, served, active FROM tenant_shares").fetchall() == [
        {"tenant": "solo", "vtime": 0, "served": 0, "active": True}]


def test_priority_orders_within_a_tenant_and_aging_lifts_a_waiting_band(database_url, conn):
    queue_workflows.configure(database_url=database_url, claim_aging_seconds=60)
    low_old = node_queue.enqueue_ingest_job("t", "fetch", priority=0, tenant="a")["id"]
    low_new = node_queue.enqueue_ingest_job("t", "fetch", priority=0, tenant="a")["id"]
    high = [node_queue.enqueue_ingest_job("t", "fetch", priority=5, tenant="a")["id"] for _ in range(2)]
    assert node_queue.claim_ingest_job("fetch", WORKER)["id"] == high[0]
    # On the database clock: the low band's oldest job has waited 6 minutes, six levels at 60 s each.
    conn.execute("UPDATE ingest_jobs SET created_at = now() - interval '6 minutes' WHERE id = %s", (low_old,))
    assert node_queue.claim_ingest_job("fetch", WORKER)["id"] == low_old
    assert node_queue.claim_ingest_job("fetch", WORKER)["id"] == high[1]  # the next low job is young: priority again
    assert node_queue.claim_ingest_job("fetch", WORKER)["id"] == low_new


def test_the_gpu_claim_orders_its_candidates_by_tenant(conn):
    # The routed claim's candidates are each model's next job and the next model-free one, whatever
    # their tenant; fair share picks among them: the least-served tenant's candidate first.
    for _ in range(3):
        node_queue.enqueue_node_job("a", "gpu", node_module="qw_test_nodes", required_model="llama", tenant="big", check_callable=False)
    small = node_queue.enqueue_node_job("b", "gpu", node_module="qw_test_nodes", tenant="small", check_callable=False)["id"]
    first = node_queue.claim_node_job("gpu", WORKER, current_model="llama")
    second = node_queue.claim_node_job("gpu", WORKER, current_model="llama")
    assert first["tenant"] == "big" and second["id"] == small, (first, second)  # big first only by name; then small, despite the warm model


def test_batch_claims_fill_from_the_least_served_tenant_and_charge_each_row(conn):
    from queue_workflows.worker.batch.worker import claim_batch_query

    tenants.set_tenant_weight("a", 3)
    _flood("a", 200)
    _flood("b", 200)
    params = {"queue": "fetch", "worker_id": "w", "lock_key": 1, "lease_seconds": 60, "limit": 10, "aging_seconds": 0}
    served: Counter[str] = Counter()
    for _ in range(8):
        rows = conn.execute(claim_batch_query("ingest_jobs", "highest_first"), params).fetchall()
        assert len({r["tenant"] for r in rows}) == 1 and len(rows) == 10  # a batch fills from one tenant's band
        served[rows[0]["tenant"]] += len(rows)
    assert served == {"a": 60, "b": 20}, served
    shares = {r["tenant"]: (r["served"], r["vtime"]) for r in conn.execute("SELECT tenant, served, vtime FROM tenant_shares")}
    assert shares == {"a": (60, 20.0), "b": (20, 20.0)}, shares
