"""Each test's database is its own copy of the migrated template: nothing an earlier test wrote,
created or left running reaches the next one, with no list of tables to keep up to date."""

from __future__ import annotations

import qw_test_app
from procs import query, service_env
from psycopg import conninfo

from queue_workflows import node_queue, tasks

PROBE = "isolation_probe"


def test_a_test_writes_rows_and_a_table_the_next_test_must_not_see(database_url):
    tasks.register_ingest_task("record", qw_test_app.record)
    node_queue.enqueue_ingest_job("record", "fetch", {"token": "left-behind"})
    query(database_url, f"CREATE TABLE {PROBE} (id int)")  # a table a later migration might add
    query(database_url, f"INSERT INTO {PROBE} VALUES (1)")
    query(database_url, "UPDATE qw_leadership SET epoch = epoch + 41, leader_id = 'left-behind'")  # a table the TRUNCATE list never had
    assert query(database_url, f"SELECT count(*) AS n FROM {PROBE}")[0]["n"] == 1


def test_the_next_test_starts_from_the_template(database_url):
    assert query(database_url, "SELECT to_regclass(%s) AS t", (PROBE,))[0]["t"] is None
    assert query(database_url, "SELECT count(*) AS n FROM ingest_jobs")[0]["n"] == 0
    assert query(database_url, "SELECT epoch, leader_id FROM qw_leadership") == [{"epoch": 0, "leader_id": None}]


def test_the_processes_a_test_starts_use_its_database(database_url, pg_server_url):
    dbname = conninfo.conninfo_to_dict(database_url)["dbname"]
    assert dbname != conninfo.conninfo_to_dict(pg_server_url).get("dbname")
    assert service_env(database_url)["QW_DATABASE_URL"] == database_url
    assert query(database_url, "SELECT current_database() AS d")[0]["d"] == dbname
