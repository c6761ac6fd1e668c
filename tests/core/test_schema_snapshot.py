"""docs/schema.sql is what the migrations build: a reader sees every table whole, and it cannot go stale."""

from __future__ import annotations

import difflib

from queue_workflows.ops import schema_dump


def test_the_schema_snapshot_equals_the_migrations_applied_to_a_fresh_database(scratch_database_url):
    fresh = schema_dump.dump(scratch_database_url)
    written = schema_dump.DEFAULT_OUTPUT.read_text()
    diff = "".join(difflib.unified_diff(written.splitlines(True), fresh.splitlines(True), "docs/schema.sql", "migrations", n=1))
    assert not diff, f"docs/schema.sql is stale: run `python -m queue_workflows.ops.schema_dump`\n{diff[:4000]}"


def test_normalize_keeps_statements_and_drops_pg_dump_noise():
    dump = "--\n-- PostgreSQL database dump\n--\n\\restrict abc123\nSET lock_timeout = 0;\n" \
           "SELECT pg_catalog.set_config('search_path', '', false);\n\n\n\nCREATE TABLE public.t (\n    id bigint\n);\n\n\n"
    assert schema_dump.normalize(dump) == "CREATE TABLE public.t (\n    id bigint\n);\n"
