"""Migration 0054 (trace context) over 0053's history: both tables and both views take the column, and its down leaves 0053's schema exactly."""

from __future__ import annotations

import psycopg
from migration_chain import just_before

from queue_workflows import db
from queue_workflows.ops.schema_dump import schema_of

TRACE = 54


def _columns(url: str, relation: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
                            (relation,)).fetchall()
    return [r[0] for r in rows]


def test_trace_context_reaches_history_and_the_views_and_its_down_restores_the_schema(scratch_database_url):
    url = scratch_database_url
    just_before(TRACE, url)
    before = schema_of(url)
    assert "trace_context" not in before
    db.bootstrap(url=url)
    for hot, history, view in (("ingest_jobs", "ingest_jobs_history", "ingest_jobs_all"),
                               ("workflow_node_jobs", "workflow_node_jobs_history", "workflow_node_jobs_all")):
        assert "trace_context" in _columns(url, hot)
        assert _columns(url, history) == _columns(url, hot) == _columns(url, view), hot
    db.downgrade(TRACE - 1, url=url)
    assert schema_of(url) == before
    assert db.bootstrap(url=url) == [v for v in (m.version for m in db.discover()) if v >= TRACE]
