"""The orchestrator's cluster metrics against a real database: every figure equals one counted here from the rows.

Real Postgres, the sampler's own queries, the Prometheus text a scrape gets; the leader and
standby processes are in test_cluster_metrics_procs.py.
"""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from queue_workflows import db, node_queue, register_ingest_task, testing
from queue_workflows.leader.cluster_exposition import registry_for
from queue_workflows.leader.cluster_metrics import BUCKETS, LIVE_STATUSES, ClusterMetrics, Histogram, TaskFolder
from queue_workflows.worker.liveness.trip import stop_job
from queue_workflows.worker.liveness.watchdogs import Trip

LOCK_CLASS = 20823  # the worker session lock's first key (qw_worker_sessions)


def scrape(metrics: ClusterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of what a scrape would get."""
    text = generate_latest(registry_for(metrics)).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name.startswith("qw_cluster_")}


def families(metrics: ClusterMetrics) -> set[str]:
    """The metric families a scrape declares (`# TYPE` lines), with or without samples."""
    text = generate_latest(registry_for(metrics)).decode()
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE qw_cluster_")}


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def metrics_for(url: str, **kw: float) -> ClusterMetrics:
    return ClusterMetrics(interval=1.0, max_tasks=int(kw.pop("max_tasks", 200)), stale_after_seconds=30.0, url=url, **kw)


def test_pure_logic_buckets_at_the_bound_and_folds_tasks_past_the_cap() -> None:
    h = Histogram((1.0, 5.0))
    for v in (0.0, 1.0, 1.0001, 5.0, 9.0):
        h.observe(v)
    assert h.cumulative() == [("1.0", 2.0), ("5.0", 4.0), ("+Inf", 5.0)] and h.total == pytest.approx(16.0001)
    fold = TaskFolder(2)
    assert [fold(t) for t in ("a", "b", "c", "a", "other", "b", "d")] == ["a", "b", "other", "a", "other", "b", "other"]


def _seed(conn: psycopg.Connection) -> None:
    """Jobs in every live status on both tables and two queues, some claimable, some delayed."""
    register_ingest_task("crawl", lambda reason: {})
    ids = [node_queue.enqueue_ingest_job("crawl", q, conn=conn)["id"] for q in ("fetch", "fetch", "fetch", "load", "load", "fetch")]
    ids += [node_queue.enqueue_node_job("embed", "cpu", node_module="qw_test_nodes", check_callable=False, conn=conn)["id"] for _ in range(5)]
    ing, node = ids[:6], ids[6:]
    conn.execute("UPDATE ingest_jobs SET created_at = now() - interval '120 s', run_after = now() - interval '90 s' WHERE id = %s", (ing[0],))
    conn.execute("UPDATE ingest_jobs SET created_at = now() - interval '500 s', run_after = now() + interval '60 s' WHERE id = %s", (ing[5],))
    conn.execute("UPDATE ingest_jobs SET status = 'running', started_at = now(), claimed_by = 'w', lease_expires_at = now() + interval '1 h' WHERE id = %s", (ing[1],))
    conn.execute("UPDATE ingest_jobs SET status = 'scheduled', run_after = now() + interval '1 h' WHERE id = %s", (ing[3],))
    conn.execute("UPDATE workflow_node_jobs SET created_at = now() - interval '40 s', run_after = created_at - interval '40 s' WHERE id = %s", (node[0],))
    conn.execute("UPDATE workflow_node_jobs SET status = 'waiting' WHERE id = ANY(%s)", (node[1:3],))
    conn.execute("UPDATE workflow_node_jobs SET status = 'running', started_at = now(), claimed_by = 'w', lease_expires_at = now() + interval '1 h' WHERE id = %s", (node[3],))
    conn.execute("UPDATE workflow_node_jobs SET status = 'completed', started_at = now(), finished_at = now() WHERE id = %s", (node[4],))


def test_gauges_equal_counts_taken_from_the_rows(database_url, conn) -> None:
    _seed(conn)
    # Workers: live idle and busy (a session holds their lock), one whose session is gone, one silent too long, a switch with no process.
    holder = psycopg.connect(database_url, autocommit=True)
    try:
        for key, worker, state, seen in ((1, "h1:fetch:1:a", "idle", "now()"), (2, "h1:fetch:2:b", "busy", "now()"),
                                         (3, "h1:fetch:3:c", "idle", "now()"), (4, "h2:cpu:4:d", "busy", "now() - interval '1 h'")):
            conn.execute(f"INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, state, last_seen) "
                         f"VALUES (%s, %s, %s, %s, %s, %s, {seen})", (worker, worker.split(":")[0], worker.split(":")[1], key, key, state))
            if key != 3:
                holder.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, key))
        conn.execute("INSERT INTO worker_controls (host_label, queue, desired_state) VALUES ('h3', 'gpu', 'off')")
        metrics = metrics_for(database_url)
        metrics.took_office(7)
        metrics.sample(conn)
        got = scrape(metrics)
        rows = conn.execute("SELECT queue, status, created_at, run_after, now() AS now FROM ingest_jobs "
                            "UNION ALL SELECT queue, status, created_at, run_after, now() FROM workflow_node_jobs").fetchall()
    finally:
        holder.close()
    live = Counter((r["queue"], r["status"]) for r in rows if r["status"] in LIVE_STATUSES)
    for queue in {r["queue"] for r in rows}:
        for status in LIVE_STATUSES:
            assert value(got, "qw_cluster_queue_jobs", queue=queue, status=status) == live[(queue, status)], (queue, status)
        ready = [(r["now"] - max(r["created_at"], r["run_after"])).total_seconds()
                 for r in rows if r["queue"] == queue and r["status"] == "queued" and r["run_after"] <= r["now"]]
        assert value(got, "qw_cluster_queue_oldest_queued_seconds", queue=queue) == pytest.approx(max(ready, default=0.0), abs=1.0), queue
    assert value(got, "qw_cluster_queue_oldest_queued_seconds", queue="fetch") == pytest.approx(90, abs=2)  # the delayed one waits since its run_after
    workers = {k[1]: v for k, v in got.items() if k[0] == "qw_cluster_workers" and v}
    assert workers == {(("host", "h1"), ("queue", "fetch"), ("state", "idle")): 1, (("host", "h1"), ("queue", "fetch"), ("state", "busy")): 1,
                       (("host", "h1"), ("queue", "fetch"), ("state", "dead")): 1, (("host", "h2"), ("queue", "cpu"), ("state", "dead")): 1,
                       (("host", "h3"), ("queue", "gpu"), ("state", "absent")): 1}
    assert value(got, "qw_cluster_is_leader") == 1 and value(got, "qw_cluster_leader_term") == 7 and value(got, "qw_cluster_database_up") == 1
    # A job finished before this leader took office is not its to count.
    assert not [k for k in got if k[0] == "qw_cluster_jobs_completed_total"]


def test_counters_and_histograms_advance_as_jobs_finish_and_fold_tasks_past_the_cap(database_url, conn) -> None:
    register_ingest_task("ok_a", lambda reason: {"ok": 1})
    register_ingest_task("ok_b", lambda reason: {"ok": 2})
    register_ingest_task("boom", lambda reason: (_ for _ in ()).throw(RuntimeError("boom")))
    metrics = metrics_for(database_url, max_tasks=2, lag_seconds=0.0)
    metrics.took_office(3, reclaims=lambda: {"fetch": 2})
    node_queue.enqueue_ingest_job("ok_a", "fetch")
    assert testing.run_until_empty("fetch") == 1  # finished before the term's first sample: not counted
    metrics.sample(conn)
    since = conn.execute("SELECT now() AS t").fetchone()["t"]
    for task in ("ok_a", "ok_a", "ok_b", "boom"):
        node_queue.enqueue_ingest_job(task, "fetch", max_attempts=1)
    delayed = node_queue.enqueue_ingest_job("ok_b", "load")["id"]
    conn.execute("UPDATE ingest_jobs SET created_at = now() - interval '3 s', run_after = now() - interval '3 s' WHERE id = %s", (delayed,))
    assert testing.run_until_empty("fetch") == 4 and testing.run_until_empty("load") == 1
    testing.wait_until(lambda: conn.execute("SELECT now() > max(finished_at) AS past FROM ingest_jobs").fetchone()["past"], timeout=5)
    metrics.sample(conn)
    first = scrape(metrics)
    register_ingest_task("ok_c", lambda reason: {"ok": 3})
    node_queue.enqueue_ingest_job("ok_c", "fetch", max_attempts=1)  # a third task name: past the cap of 2
    assert testing.run_until_empty("fetch") == 1
    testing.wait_until(lambda: conn.execute("SELECT now() > max(finished_at) AS past FROM ingest_jobs").fetchone()["past"], timeout=5)
    metrics.sample(conn)
    got = scrape(metrics)
    rows = conn.execute("SELECT queue, task_name, status, greatest(created_at, run_after) AS ready, started_at, finished_at "
                        "FROM ingest_jobs WHERE finished_at > %s", (since,)).fetchall()
    assert len(rows) == 6
    # New names meet the cap of 2 in name order: boom and ok_a keep theirs, ok_b (and later ok_c) count as other.
    assert value(first, "qw_cluster_jobs_completed_total", task="ok_a") == 2 and value(first, "qw_cluster_jobs_failed_total", task="boom") == 1
    assert value(first, "qw_cluster_jobs_completed_total", task="other") == 2 and value(first, "qw_cluster_jobs_completed_total", task="ok_b") is None
    assert value(got, "qw_cluster_jobs_completed_total", task="other") == 3 and value(got, "qw_cluster_jobs_completed_total", task="ok_a") == 2
    for kind, seconds in (("wait", lambda r: max(0.0, (r["started_at"] - r["ready"]).total_seconds())),
                          ("run", lambda r: (r["finished_at"] - r["started_at"]).total_seconds())):
        for queue in ("fetch", "load"):
            mine = [seconds(r) for r in rows if r["queue"] == queue]
            name = f"qw_cluster_job_{kind}_seconds"
            assert value(got, f"{name}_count", queue=queue) == len(mine)
            assert value(got, f"{name}_sum", queue=queue) == pytest.approx(sum(mine), abs=1e-3)
            for bound in BUCKETS:
                assert value(got, f"{name}_bucket", queue=queue, le=repr(bound)) == sum(1 for s in mine if s <= bound), (kind, queue, bound)
    assert value(got, "qw_cluster_job_wait_seconds_bucket", queue="load", le="1.0") == 0  # it waited its 3 s
    assert value(got, "qw_cluster_job_reclaims_total", queue="fetch") == 2


def test_worker_exits_are_recorded_by_the_trip_and_counted_from_the_term_on(database_url, conn) -> None:
    exited: list[int] = []

    def trip(code: int) -> None:
        stop_job(None, Trip(code, "test trip"), url=database_url, worker_id=f"h1:fetch:{code}:x", max_trips=3,
                 exit_fn=lambda c, reason: exited.append(c), origin=("h1", "fetch"))

    trip(79)  # before the term: not its to count
    metrics = metrics_for(database_url)
    metrics.took_office(1)
    metrics.sample(conn)
    for code in (77, 77, 75):
        trip(code)
    metrics.sample(conn)
    got = scrape(metrics)
    assert exited == [79, 77, 77, 75]
    assert {k[1]: v for k, v in got.items() if k[0] == "qw_cluster_worker_exits_total"} == {(("code", "75"),): 1, (("code", "77"),): 2}
    rows = conn.execute("SELECT host_label, queue, code, reason FROM qw_worker_exits ORDER BY id").fetchall()
    assert [(r["host_label"], r["queue"], r["code"]) for r in rows] == [("h1", "fetch", c) for c in (79, 77, 77, 75)]


def test_a_standby_serves_only_its_role_and_a_lost_database_drops_the_gauges_but_keeps_the_counters(database_url, conn) -> None:
    standby_families = {"qw_cluster_is_leader", "qw_cluster_leader_term", "qw_cluster_database_up"}
    register_ingest_task("crawl", lambda reason: {})
    node_queue.enqueue_ingest_job("crawl", "fetch")
    metrics = metrics_for(database_url)
    conn.execute("UPDATE qw_leadership SET epoch = 41 WHERE id = 1")
    metrics.step()
    standby = scrape(metrics)
    assert standby == {("qw_cluster_is_leader", ()): 0, ("qw_cluster_leader_term", ()): 41, ("qw_cluster_database_up", ()): 1}
    assert families(metrics) == standby_families
    metrics.took_office(42, reclaims=lambda: {"fetch": 1})
    metrics.step()
    up, up_families = scrape(metrics), families(metrics)
    assert value(up, "qw_cluster_job_reclaims_total", queue="fetch") == 1 and value(up, "qw_cluster_queue_jobs", queue="fetch", status="queued") == 1
    metrics.url = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    metrics._close()
    metrics.step()
    down = scrape(metrics)
    assert value(down, "qw_cluster_database_up") == 0 and value(down, "qw_cluster_is_leader") == 1
    gauges = {"qw_cluster_queue_jobs", "qw_cluster_queue_oldest_queued_seconds", "qw_cluster_workers", "qw_cluster_last_sample_timestamp_seconds"}
    assert not families(metrics) & gauges and gauges <= up_families
    assert value(down, "qw_cluster_job_reclaims_total", queue="fetch") == 1
    metrics.left_office()
    assert families(metrics) == standby_families


def test_a_sample_taken_under_a_term_that_ended_meanwhile_is_not_published(database_url) -> None:
    metrics = metrics_for(database_url)
    metrics.took_office(5)

    class Resigning:
        """A connection whose first read ends the term, as the leader's hold would between two statements."""

        def __init__(self, conn: psycopg.Connection) -> None:
            self.conn = conn

        def execute(self, *args: object, **kw: object) -> object:
            metrics.left_office()
            return self.conn.execute(*args, **kw)  # type: ignore[arg-type]

    with db.connect(autocommit=True, url=database_url) as c:
        metrics.sample(Resigning(c))  # type: ignore[arg-type]
    assert metrics.latest().is_leader is False and value(scrape(metrics), "qw_cluster_is_leader") == 0
