"""The test suite's testcontainers path, proven once: with QW_TEST_PG_IMAGE naming a local
image (.ci/containers.sh sets it), the session's Postgres is a container reached over TCP."""

from __future__ import annotations

import os

import psycopg
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_session_postgres_is_a_testcontainer(pg_server_url):
    if not os.environ.get("QW_TEST_PG_IMAGE"):
        pytest.skip("QW_TEST_PG_IMAGE is not set: the session uses pgserver (.ci/containers.sh sets it)")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        server_addr = conn.execute("SELECT inet_server_addr()").fetchone()[0]
    assert server_addr is not None, f"{pg_server_url} is a local socket, not a container"
    assert "host=/" not in pg_server_url
