"""History: finished jobs leave the hot tables for day partitions, in batches, and retention drops whole days."""

from __future__ import annotations

import threading
import time

import psycopg
from procs import TEST_INGEST_QUEUES, query

import queue_workflows
from queue_workflows.dag import Workflow
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.leader import history, retention

N = "qw_dag_nodes"
HOUR = 3600.0
PAIRS = (("ingest_jobs", "ingest_jobs_history"), ("ingest_jobs", "ingest_jobs_all"),
         ("workflow_node_jobs", "workflow_node_jobs_history"), ("workflow_node_jobs", "workflow_node_jobs_all"))


def configure(url: str, **settings: float) -> None:
    queue_workflows.configure(database_url=url, ingest_queues=TEST_INGEST_QUEUES, **settings)


def columns(url: str, table: str) -> list[tuple[str, str]]:
    return [(r["column_name"], r["data_type"]) for r in query(
        url, "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
             "ORDER BY ordinal_position", (table,))]


def finished(url: str, status: str, age_hours: float, n: int = 1) -> list[int]:
    return [r["id"] for r in query(
        url, "INSERT INTO ingest_jobs (task_name, queue, status, created_at, finished_at) "
             "SELECT 't', 'fetch', %s, now() - %s * interval '1 hour', now() - %s * interval '1 hour' "
             "FROM generate_series(1, %s) RETURNING id", (status, age_hours + 1, age_hours, n))]


def ids(url: str, table: str) -> set[int]:
    return {r["id"] for r in query(url, f"SELECT id FROM {table}")}


def partitions(url: str, parent: str) -> set[str]:
    return {r["relname"] for r in query(url, "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                                             "WHERE i.inhparent = %s::regclass", (parent,))}


def test_history_tables_and_views_have_exactly_the_hot_tables_columns_in_order(database_url):
    for hot, other in PAIRS:
        assert columns(database_url, hot), hot
        assert columns(database_url, other) == columns(database_url, hot), f"{other} differs from {hot}: a move would misplace values"


def test_finished_jobs_past_the_delay_move_whole_and_live_ones_stay(database_url, conn):
    configure(database_url, history_after_seconds=HOUR, retain_finished_seconds=7 * 24 * HOUR)
    old = finished(database_url, "completed", 2) + finished(database_url, "failed", 30) + finished(database_url, "cancelled", 2)
    recent = finished(database_url, "completed", 0.5)
    live = [r["id"] for r in query(database_url, "INSERT INTO ingest_jobs (task_name, queue, status) "
                                                 "VALUES ('t', 'fetch', 'queued'), ('t', 'fetch', 'running') RETURNING id")]
    before = query(database_url, "SELECT * FROM ingest_jobs WHERE id = ANY(%s) ORDER BY id", (old,))
    moved, covered = history.move_once(conn)
    assert moved["move_ingest_jobs"] == 3 and covered is not None
    assert ids(database_url, "ingest_jobs") == {*recent, *live}
    assert query(database_url, "SELECT * FROM ingest_jobs_history ORDER BY id") == before  # every column, as it was
    assert any(p.endswith(covered[1].strftime("%Y%m%d")) for p in partitions(database_url, "ingest_jobs_history"))  # days ahead made
    assert query(database_url, "SELECT count(*) AS n FROM ingest_jobs_history_default")[0]["n"] == 0  # each row in its day
    configure(database_url, history_after_seconds=0)  # 0: nothing moves
    assert history.move_once(conn)[0] == {}


def test_a_running_dag_keeps_its_nodes_hot_and_a_completed_one_moves_whole(database_url, conn):
    configure(database_url, history_after_seconds=60)
    done = queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo").node("b", f"{N}:echo", deps=["a"]), {})
    for _ in ("a", "b"):  # each node completes, then the drain fans out (and at last finishes the run)
        query(database_url, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() - interval '1 hour', "
                            "context_delta = '{\"x\": 1}' WHERE run_id = %s AND status = 'queued'", (done,))
        DispatchDrain().drain_once(conn)
    running = queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo").node("b", f"{N}:echo", deps=["a"]), {})
    query(database_url, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() - interval '1 hour' "
                        "WHERE run_id = %s AND node_name = 'a'", (running,))
    assert queue_workflows.run_status(done)["status"] == "completed"
    query(database_url, "UPDATE workflow_runs SET finished_at = now() - interval '1 hour' WHERE id = %s", (done,))
    history.move_once(conn)
    assert {r["run_id"] for r in query(database_url, "SELECT run_id FROM workflow_node_jobs")} == {running}
    assert {r["node_name"] for r in query(database_url, "SELECT node_name FROM workflow_node_jobs_history WHERE run_id = %s", (done,))} == {"a", "b"}
    status = queue_workflows.run_status(done)  # DAG outputs read through both
    assert status["status"] == "completed" and {k: (n["status"], n["output"]) for k, n in status["nodes"].items()} == {
        "a": ("completed", {"x": 1}), "b": ("completed", {"x": 1})}


def test_retention_drops_whole_past_days_and_keeps_the_window(database_url, conn):
    configure(database_url, history_after_seconds=60, retain_finished_seconds=0)
    old = finished(database_url, "completed", 24 * 5) + finished(database_url, "completed", 24 * 4)
    kept = finished(database_url, "completed", 24 * 1)
    history.move_once(conn)
    assert ids(database_url, "ingest_jobs_history") == {*old, *kept}
    days = partitions(database_url, "ingest_jobs_history")
    configure(database_url, history_after_seconds=60, retain_finished_seconds=3 * 24 * HOUR)
    dropped = retention.prune_once(conn)["drop_history"]
    assert dropped >= 4  # the two past days of each history table, at least
    assert ids(database_url, "ingest_jobs_history") == set(kept)
    assert len(partitions(database_url, "ingest_jobs_history")) == len(days) - dropped // 2


def test_the_mover_works_off_a_backlog_in_capped_batches(database_url, conn):
    configure(database_url, history_after_seconds=60)
    backlog = finished(database_url, "completed", 3, n=7)
    mover = history.HistoryMover(stop_event=threading.Event(), batch=3, interval=60, pause=0.01)
    assert [mover._step(conn) for _ in range(3)] == [0.01, 0.01, 60]
    assert ids(database_url, "ingest_jobs_history") == set(backlog) and mover.total == 7


def test_the_vram_learner_keeps_the_samples_that_moved(database_url, conn):
    configure(database_url, history_after_seconds=60)
    insert = ("INSERT INTO workflow_node_jobs (node_name, node_module, queue, required_model, status, peak_vram_bytes, started_at, finished_at) "
              "SELECT 'embed', 'mod', 'gpu', 'm1', %s, 4 * 2^30, now() - interval '2 hours', now() - %s * interval '1 hour' "
              "FROM generate_series(1, %s) RETURNING id")
    query(database_url, insert, ("completed", 1, 10))
    assert history.move_once(conn)[0]["move_standalone_node_jobs"] == 10
    [job] = query(database_url, insert, ("running", 0, 1))
    query(database_url, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() WHERE id = %s", (job["id"],))
    assert query(database_url, "SELECT samples FROM gpu_task_vram WHERE model_id = 'm1'") == [{"samples": 11}]


def test_a_failed_runs_old_nodes_stay_hot_and_get_no_partitions(database_url, conn):
    configure(database_url, history_after_seconds=60, retain_finished_seconds=0)
    run = query(database_url, "INSERT INTO workflow_runs (workflow_name, status, finished_at) VALUES ('w', 'failed', now() - interval '400 days') "
                              "RETURNING id")[0]["id"]
    query(database_url, "INSERT INTO workflow_node_jobs (run_id, node_name, queue, status, finished_at) "
                        "VALUES (%s, 'a', 'cpu', 'failed', now() - interval '400 days')", (run,))
    finished(database_url, "completed", 2)
    assert history.move_once(conn)[0] == {"move_ingest_jobs": 1, "move_standalone_node_jobs": 0, "move_run_node_jobs": 0}
    assert len(partitions(database_url, "workflow_node_jobs_history")) <= 1 + 1 + 1 + history.DAYS_AHEAD  # default, yesterday, today, ahead
    assert query(database_url, "SELECT status FROM workflow_node_jobs WHERE run_id = %s", (run,)) == [{"status": "failed"}]


def test_a_drop_behind_an_open_reader_gives_up_in_seconds_and_drops_on_a_later_step(database_url, conn):
    configure(database_url, history_after_seconds=60, retain_finished_seconds=0)
    old = finished(database_url, "completed", 24 * 5)
    history.move_once(conn)
    configure(database_url, history_after_seconds=60, retain_finished_seconds=3 * 24 * HOUR)
    with psycopg.connect(database_url) as reader:  # a report with the ingest history open
        reader.execute("SELECT count(*) FROM ingest_jobs_all").fetchone()
        began = time.monotonic()
        retention.prune_once(conn)
        assert time.monotonic() - began < 4  # one wait of 2 s, then it gives up for this step
        assert ids(database_url, "ingest_jobs_history") == set(old)  # its day waits for the reader
    assert retention.prune_once(conn)["drop_history"] >= 1
    assert ids(database_url, "ingest_jobs_history") == set()
