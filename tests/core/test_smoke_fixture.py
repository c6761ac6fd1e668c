from pathlib import Path

from queue_workflows import db

APP_MIGRATIONS = Path(__file__).parents[1] / "apps" / "app_migrations"


def test_session_database_has_both_chains(conn):
    assert db.schema_version(conn) == db.latest_version()
    assert db.schema_version(conn, "test_app_schema_version") == db.latest_version(APP_MIGRATIONS) >= 1
