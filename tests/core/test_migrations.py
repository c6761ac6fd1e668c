from __future__ import annotations

import threading

import psycopg
import pytest
from procs import wait_until

from queue_workflows import db
from queue_workflows.errors import MigrationError, SchemaNotReadyError

ENGINE_TABLES = {"workflow_runs", "workflow_node_jobs", "ingest_jobs", "worker_heartbeats"}


ALL = [m.version for m in db.discover()]  # the engine's chain, every version in order


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_bootstrap_is_idempotent_and_recorded(scratch_database_url):
    assert db.bootstrap(url=scratch_database_url) == ALL
    assert db.bootstrap(url=scratch_database_url) == []
    assert ENGINE_TABLES | {"queue_schema_version"} <= tables(scratch_database_url)
    with db.connect(url=scratch_database_url) as conn:
        assert db.schema_version(conn) == ALL[-1]


def test_concurrent_bootstraps_apply_the_chain_once(scratch_database_url):
    results: list[list[int]] = []
    threads = [threading.Thread(target=lambda: results.append(db.bootstrap(url=scratch_database_url))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(results, key=len) == [[], [], [], ALL]


def test_a_migrator_that_loses_the_race_to_create_the_ledger_waits_and_applies_nothing(scratch_database_url, tmp_path):
    (tmp_path / "0001_gated.sql").write_text("LOCK TABLE gate IN ACCESS EXCLUSIVE MODE;")
    results: dict[str, list[int]] = {}

    def migrate(name: str) -> None:  # by name: once the gate opens, either thread may finish first
        results[name] = db.bootstrap(migrations_dir=tmp_path, version_table="gated_ledger", url=scratch_database_url)

    def waiting() -> int:
        with psycopg.connect(scratch_database_url) as probe:
            row = probe.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND wait_event_type = 'Lock'").fetchone()
        return row[0] if row else 0

    with psycopg.connect(scratch_database_url) as gate:
        gate.execute("CREATE TABLE gate (id int)")
        gate.commit()
        gate.execute("LOCK TABLE gate IN ACCESS EXCLUSIVE MODE")  # the first migrator stops inside its migration
        first = threading.Thread(target=migrate, args=("first",))
        first.start()
        wait_until(lambda: waiting() == 1, timeout=10, what="the first migrator waits on the gate")
        second = threading.Thread(target=migrate, args=("second",))
        second.start()  # its CREATE of the ledger waits on the first's uncommitted catalog row
        wait_until(lambda: waiting() == 2, timeout=10, what="the second migrator waits on the first")
    for t in (first, second):
        t.join(timeout=30)
    assert results == {"first": [1], "second": []}


def test_downgrade_reverses_to_a_version_and_back_up(scratch_database_url):
    db.bootstrap(url=scratch_database_url)
    assert db.downgrade(2, url=scratch_database_url) == [v for v in ALL[::-1] if v > 2]
    assert tables(scratch_database_url) & ENGINE_TABLES == {"workflow_runs", "workflow_node_jobs"}
    assert db.bootstrap(url=scratch_database_url) == [v for v in ALL if v > 2]
    assert db.downgrade(0, url=scratch_database_url) == ALL[::-1]
    assert not tables(scratch_database_url) & ENGINE_TABLES


def test_a_host_chain_runs_beside_the_engine_with_its_own_ledger(scratch_database_url, tmp_path):
    (tmp_path / "0001_parcels.sql").write_text("CREATE TABLE parcels (id int PRIMARY KEY);")
    (tmp_path / "0001_parcels.down.sql").write_text("DROP TABLE parcels;")
    db.bootstrap(url=scratch_database_url)
    assert db.bootstrap(url=scratch_database_url, migrations_dir=tmp_path, version_table="host_schema_version") == [1]
    with db.connect(url=scratch_database_url) as conn:
        assert (db.schema_version(conn), db.schema_version(conn, "host_schema_version")) == (db.latest_version(), 1)
    assert db.downgrade(0, url=scratch_database_url, migrations_dir=tmp_path, version_table="host_schema_version") == [1]
    assert "ingest_jobs" in tables(scratch_database_url) and "parcels" not in tables(scratch_database_url)


def test_a_failing_migration_rolls_back_the_whole_run(scratch_database_url, tmp_path):
    (tmp_path / "0001_ok.sql").write_text("CREATE TABLE ok_table (id int);")
    (tmp_path / "0002_broken.sql").write_text("CREATE TABLE broken (id int); SELECT no_such_function();")
    with pytest.raises(psycopg.errors.UndefinedFunction):
        db.bootstrap(url=scratch_database_url, migrations_dir=tmp_path, version_table="host_schema_version")
    assert not {"ok_table", "broken", "host_schema_version"} & tables(scratch_database_url)


@pytest.mark.parametrize("name", ["Bad-Name.sql", "1_short.sql", "0001_UPPER.sql"])
def test_misnamed_migration_files_are_refused(tmp_path, name):
    (tmp_path / name).write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_name.sql"):
        db.discover(tmp_path)


def test_bad_version_table_names_are_refused(scratch_database_url):
    with pytest.raises(MigrationError, match="plain lowercase identifier"):
        db.bootstrap(url=scratch_database_url, version_table="x; DROP TABLE y")


def test_wait_for_schema_returns_once_ready_and_times_out_clearly(scratch_database_url):
    clock = iter(range(1000))
    with pytest.raises(SchemaNotReadyError, match="did not reach version 5 within 2s"):
        db.wait_for_schema(5, 2, url=scratch_database_url, sleep_fn=lambda _s: None, now_fn=lambda: next(clock))
    db.bootstrap(url=scratch_database_url)
    assert db.wait_for_schema(5, 2, url=scratch_database_url) == db.latest_version()


def test_every_migration_has_a_down_file():
    assert all(m.down is not None for m in db.discover())


def test_a_downgrade_above_the_latest_version_is_refused(scratch_database_url):
    db.bootstrap(url=scratch_database_url)
    with pytest.raises(MigrationError, match=f"the latest migration is {ALL[-1]}"):
        db.downgrade(ALL[-1] + 1, url=scratch_database_url)
