from queue_workflows import db


def test_session_database_has_both_chains(conn):
    assert db.schema_version(conn) == db.latest_version()
    assert db.schema_version(conn, "test_app_schema_version") == 1
