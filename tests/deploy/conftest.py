"""Fixtures of the deployment tests: throwaway login roles, each a member of one process kind's group role."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import conninfo, sql

from queue_workflows import db


@pytest.fixture
def login_as(database_url: str) -> Iterator[Callable[[str], str]]:
    """`login_as("qw_worker")`: the DSN of a fresh LOGIN role that is only a member of that group."""
    made: list[str] = []

    def make(group: str) -> str:
        role = f"qw_t{uuid.uuid4().hex[:8]}_{group.removeprefix('qw_')}"
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(sql.Identifier(role), sql.Identifier(group)))
        made.append(role)
        return conninfo.make_conninfo(database_url, user=role)

    yield make
    db.close_pools()
    with psycopg.connect(database_url, autocommit=True) as admin:
        for role in made:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                          " AND usename = %s", (role,))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
