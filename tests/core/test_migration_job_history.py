"""Migration 0053 (job history) on a populated database: up with a reader open, the mover's online move, down restores every row exactly."""

from __future__ import annotations

import psycopg
from migration_chain import chain_to, just_before

import queue_workflows
from queue_workflows import db
from queue_workflows.leader import history

ALL = [m.version for m in db.discover()]
HISTORY = 53
DIGEST = "SELECT count(*), md5(string_agg(md5(t::text), '' ORDER BY t.id)) FROM {} AS t"


def _digests(url: str) -> dict[str, object]:
    with psycopg.connect(url) as conn:
        out: dict[str, object] = {t: conn.execute(DIGEST.format(t)).fetchone() for t in ("ingest_jobs", "workflow_node_jobs", "job_events")}
    return out



def _populate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO ingest_jobs (task_name, queue, status, args, claimed_by, cpu_seconds, started_at, finished_at, dedup_key) "
                     "SELECT 't', 'fetch', (ARRAY['completed', 'failed', 'cancelled'])[1 + i % 3], jsonb_build_object('i', i), 'h:w', i / 7.0, "
                     "now() - make_interval(secs => i * 20 + 60), now() - make_interval(secs => i * 20), "
                     "CASE WHEN i % 10 = 0 THEN 'k' || i END FROM generate_series(1, 20000) AS i")
        conn.execute("INSERT INTO ingest_jobs (task_name, queue, status) SELECT 't', 'fetch', s FROM unnest(ARRAY['queued', 'running', 'scheduled']) AS s")
        conn.execute("INSERT INTO workflow_runs (id, workflow_name, status, finished_at) "
                     "SELECT i, 'w', CASE WHEN i % 4 = 0 THEN 'running' ELSE 'completed' END, "
                     "CASE WHEN i % 4 <> 0 THEN now() - make_interval(secs => i * 300) END FROM generate_series(1, 200) AS i")
        conn.execute("INSERT INTO workflow_node_jobs (run_id, node_name, queue, status, context_delta, finished_at) "
                     "SELECT r, n, 'cpu', CASE WHEN r % 4 = 0 AND n = 'b' THEN 'queued' ELSE 'completed' END, jsonb_build_object('r', r), "
                     "CASE WHEN r % 4 = 0 AND n = 'b' THEN NULL ELSE now() - make_interval(secs => r * 300 + 10) END "
                     "FROM generate_series(1, 200) AS r, unnest(ARRAY['a', 'b']) AS n")
        conn.execute("UPDATE workflow_node_jobs SET status = 'skipped' WHERE node_name = 'b' AND run_id % 4 = 1")  # its marker event: once
        conn.execute("INSERT INTO workflow_node_jobs (node_name, queue, status, finished_at) "
                     "SELECT 'solo', 'gpu', s, now() - interval '1 day' FROM unnest(ARRAY['completed', 'failed', 'cancelled']) AS s")
        conn.execute("INSERT INTO job_events (job_table, job_id, from_status, to_status, attempts) "
                     "SELECT 'workflow_node_jobs', id, 'running', status, 1 FROM workflow_node_jobs")


def test_history_migrates_up_moves_online_and_rolls_back_every_row_exactly(scratch_database_url, monkeypatch, tmp_path):
    url = scratch_database_url
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=5s")  # a migration that waits on the reader fails, rather than hangs
    before = just_before(HISTORY, url)
    _populate(url)
    original = _digests(url)
    queue_workflows.configure(database_url=url, history_after_seconds=5, retain_finished_seconds=0)
    with psycopg.connect(url) as reader:  # a report holding a snapshot does not hold the migration or the mover up
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        seen = reader.execute("SELECT count(*) FROM ingest_jobs").fetchone()
        assert db.bootstrap(url=url, migrations_dir=chain_to(HISTORY, tmp_path)) == [HISTORY]
        assert _digests(url) == original  # the migration itself moves nothing
        with db.connect(autocommit=True, url=url) as conn:
            steps = 0
            while sum(history.move_once(conn, batch=2000)[0].values()):
                steps += 1
        assert steps >= 10  # batch by batch
        assert reader.execute("SELECT count(*) FROM ingest_jobs").fetchone() == seen
        reader.rollback()
    assert db.bootstrap(url=url) == [v for v in ALL if v > HISTORY]
    with psycopg.connect(url) as conn:
        hot = dict(conn.execute("SELECT status, count(*) FROM ingest_jobs GROUP BY status").fetchall())
        assert hot == {"queued": 1, "running": 1, "scheduled": 1}
        assert conn.execute("SELECT count(*) FROM ingest_jobs_history").fetchone() == (20000,)
        assert conn.execute("SELECT count(*) FROM ingest_jobs_history_default").fetchone() == (0,)  # each row in its day's partition
        nodes = conn.execute("SELECT count(*) FILTER (WHERE run_id IS NULL), count(DISTINCT run_id) FROM workflow_node_jobs_history").fetchone()
        assert nodes == (1, 150)  # the completed solo job and every completed run's nodes; running runs' stay hot
        assert conn.execute("SELECT count(*) FROM workflow_node_jobs WHERE run_id % 4 <> 0").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ingest_jobs_all").fetchone() == (20003,)
    assert db.downgrade(before, url=url) == [v for v in ALL if v > before][::-1]
    assert _digests(url) == original
    assert db.bootstrap(url=url, migrations_dir=chain_to(HISTORY, tmp_path)) == [HISTORY]  # later ones add columns to every row's text
    assert _digests(url) == original
