from __future__ import annotations

import pytest

from queue_workflows import node_queue, register_ingest_task, testing


def test_run_until_empty_runs_ready_jobs_in_process_and_stops(conn):
    seen: list[int] = []
    register_ingest_task("collect", lambda reason, args: seen.append(args["n"]) or {"n": args["n"]})
    for n in range(5):
        node_queue.enqueue_ingest_job("collect", "alpha", {"n": n})
    node_queue.enqueue_ingest_job("collect", "beta", {"n": 99})
    assert testing.run_until_empty("alpha") == 5
    assert seen == [0, 1, 2, 3, 4]
    counts = node_queue.ingest_snapshot()["queues"]
    assert counts["alpha"]["completed"] == 5 and counts["beta"]["queued"] == 1
    assert testing.run_until_empty("alpha") == 0


def test_create_and_drop_database(pg_server_url):
    url = testing.create_database(pg_server_url, "qw_helper")
    import psycopg

    with psycopg.connect(url) as c:
        assert c.execute("SELECT current_database()").fetchone()[0].startswith("qw_helper_")
    testing.drop_database(pg_server_url, url)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url).close()


def test_wait_until_returns_the_value_or_times_out():
    values = iter([0, None, 7])
    assert testing.wait_until(lambda: next(values), timeout=5, interval=0) == 7
    with pytest.raises(TimeoutError, match="waiting for nothing"):
        testing.wait_until(lambda: False, timeout=0.05, interval=0.01, what="nothing")
