"""Migration 0052 (claim floors, autovacuum settings) applied to a populated database with a reader open, and rolled back."""

from __future__ import annotations

import psycopg
from migration_chain import chain_to, just_before

from queue_workflows import db

ALL = [m.version for m in db.discover()]
FLOORS = 52


def _state(url: str) -> dict[str, object]:
    with psycopg.connect(url) as conn:
        counts = dict(conn.execute("SELECT status, count(*) FROM ingest_jobs GROUP BY status").fetchall())
        options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'ingest_jobs'::regclass").fetchone()[0]  # type: ignore[index]
        beats = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'worker_heartbeats'::regclass").fetchone()[0]  # type: ignore[index]
        floors = conn.execute("SELECT to_regproc('qw_claim_floors') IS NOT NULL").fetchone()[0]  # type: ignore[index]
    return {"counts": counts, "jobs": sorted(options or []), "beats": sorted(beats or []), "floors": floors}



def test_claim_floors_migrate_up_and_down_with_rows_and_a_reader_open(scratch_database_url, monkeypatch, tmp_path):
    url = scratch_database_url
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=5s")  # a migration that waits on the reader fails, rather than hangs
    before = just_before(FLOORS, url)
    with psycopg.connect(url, autocommit=True) as conn:
        for status, n in (("queued", 3000), ("running", 200), ("completed", 5000), ("failed", 100)):
            conn.execute("INSERT INTO ingest_jobs (task_name, queue, status, claimed_by) SELECT 't', 'fetch', %s, 'w' FROM generate_series(1, %s)",
                         (status, n))
        conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key) VALUES ('w', 'h', 'fetch', 1, 1)")
    old = _state(url)
    assert old["jobs"] == [] and old["floors"] is False
    with psycopg.connect(url) as reader:  # a report holding a snapshot on the table does not hold the migration up
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM ingest_jobs")
        assert db.bootstrap(url=url, migrations_dir=chain_to(FLOORS, tmp_path)) == [FLOORS]
        new = _state(url)
        assert new["counts"] == old["counts"]
        assert "fillfactor=90" in new["jobs"] and "autovacuum_vacuum_scale_factor=0" in new["jobs"]  # type: ignore[operator]
        assert "fillfactor=50" in new["beats"] and new["floors"] is True  # type: ignore[operator]
        reader.rollback()
    assert db.bootstrap(url=url) == [v for v in ALL if v > FLOORS]
    assert db.downgrade(before, url=url) == [v for v in ALL if v > before][::-1]  # dropping a trigger waits for readers
    assert _state(url) == old
    assert db.bootstrap(url=url) == [v for v in ALL if v > before]
