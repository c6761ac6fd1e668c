"""Migration 0056 (the tenants trigger's function in plpgsql): enqueues activate tenants as before on both sides, and its down restores 0055's schema exactly."""

from __future__ import annotations

import psycopg
from migration_chain import just_before

from queue_workflows import db
from queue_workflows.ops.schema_dump import schema_of

PLPGSQL = 56


def _language(url: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT l.lanname FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang "
                            "WHERE p.proname = 'qw_tenants_activate'").fetchone()[0]  # type: ignore[index]


def _activation(url: str, tenant: str) -> list[tuple[str, bool, float]]:
    """Enqueue one job each for `tenant` and 'default' in one statement, then idle and re-enqueue
    `tenant`: the tenants' rows as the trigger left them (an idled tenant comes back at the floor)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO ingest_jobs (task_name, queue, tenant) VALUES ('t', 'fetch', %s), ('t', 'fetch', 'default')", (tenant,))
        conn.execute("UPDATE tenant_shares SET vtime = 5 WHERE queue = 'fetch' AND tenant = 'default'")
        conn.execute("UPDATE tenant_shares SET active = false, vtime = 1 WHERE queue = 'fetch' AND tenant = %s", (tenant,))
        conn.execute("INSERT INTO ingest_jobs (task_name, queue, tenant) VALUES ('t', 'fetch', %s)", (tenant,))
        rows = conn.execute("SELECT tenant, active, vtime FROM tenant_shares WHERE queue = 'fetch' ORDER BY tenant").fetchall()
    return [(t, a, float(v)) for t, a, v in rows]


def test_tenants_activate_in_plpgsql_up_and_down(scratch_database_url):
    url = scratch_database_url
    just_before(PLPGSQL, url)
    before = schema_of(url)
    assert _language(url) == "sql"
    old = _activation(url, "acme")
    db.bootstrap(url=url)
    assert _language(url) == "plpgsql"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM ingest_jobs")
        conn.execute("DELETE FROM tenant_shares")
    assert _activation(url, "acme") == old == [("acme", True, 5.0), ("default", True, 5.0)]
    db.downgrade(PLPGSQL - 1, url=url)
    assert schema_of(url) == before
