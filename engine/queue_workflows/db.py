"""Connections and the migration chain (bootstrap, downgrade, wait_for_schema)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from . import config, migrations
from .errors import MigrationError, SchemaNotReadyError

log = logging.getLogger(__name__)

Conn = psycopg.Connection[dict[str, Any]]
"""Every engine connection returns rows as dicts."""

DEFAULT_VERSION_TABLE = "queue_schema_version"
_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_pools: dict[str, ConnectionPool[Conn]] = {}
_pools_lock = threading.Lock()


def connect(*, autocommit: bool = False, url: str | None = None) -> Conn:
    """A new connection with dict rows; the caller closes it."""
    return psycopg.connect(url or config.current().database_url(), autocommit=autocommit, row_factory=dict_row)


def pool() -> ConnectionPool[Conn]:
    """The process's shared pool for the configured database, opened on first use."""
    cfg = config.current()
    url = cfg.database_url()
    with _pools_lock:
        existing = _pools.get(url)
        if existing is None:
            existing = ConnectionPool(
                url,
                connection_class=psycopg.Connection[dict[str, Any]],
                min_size=1,
                max_size=cfg.settings.pool_max_size,
                kwargs={"row_factory": dict_row},
                open=True,
                name="queue_workflows",
            )
            _pools[url] = existing
        return existing


def close_pools() -> None:
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for p in pools:
        p.close()


@contextmanager
def transaction(conn: Conn | None = None) -> Iterator[Conn]:
    """Use the caller's connection as is (its transaction, its commit), or a pooled one that commits on exit."""
    if conn is not None:
        yield conn
        return
    with pool().connection() as pooled:
        yield pooled


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    up: Path
    down: Path | None


def discover(migrations_dir: Path | None = None) -> list[Migration]:
    directory = Path(migrations_dir) if migrations_dir is not None else migrations.dir()
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        if path.name.endswith(".down.sql"):
            continue
        match = _MIGRATION_RE.match(path.name)
        if not match:
            raise MigrationError(f"{path}: migration files are named NNNN_name.sql")
        down = path.with_name(path.name.removesuffix(".sql") + ".down.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path, down if down.exists() else None))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"{directory}: two migrations share a version number")
    return found


def _check_version_table(version_table: str) -> sql.Identifier:
    if not _IDENT_RE.match(version_table):
        raise MigrationError(f"version_table {version_table!r} is not a plain lowercase identifier")
    return sql.Identifier(version_table)


def _applied(conn: Conn, table: sql.Identifier) -> set[int]:
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        ).format(table)
    )
    return {row["version"] for row in conn.execute(sql.SQL("SELECT version FROM {}").format(table))}


def _lock_chain(conn: Conn, version_table: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"queue_workflows:migrate:{version_table}",))


def bootstrap(
    *,
    migrations_dir: Path | None = None,
    version_table: str = DEFAULT_VERSION_TABLE,
    url: str | None = None,
) -> list[int]:
    """Apply every migration not yet in the ledger, in one transaction under an advisory lock.

    Idempotent and safe to call from several processes at once; returns the versions applied.
    """
    table = _check_version_table(version_table)
    chain = discover(migrations_dir)
    applied_now: list[int] = []
    with connect(url=url) as conn, conn.transaction():
        _lock_chain(conn, version_table)
        done = _applied(conn, table)
        for migration in chain:
            if migration.version in done:
                continue
            log.info("applying migration %04d_%s", migration.version, migration.name)
            conn.execute(migration.up.read_text())
            conn.execute(
                sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(table),
                (migration.version, migration.name),
            )
            applied_now.append(migration.version)
    return applied_now


def downgrade(
    to_version: int,
    *,
    migrations_dir: Path | None = None,
    version_table: str = DEFAULT_VERSION_TABLE,
    url: str | None = None,
) -> list[int]:
    """Reverse applied migrations above `to_version`, newest first; returns the versions removed."""
    if not isinstance(to_version, int) or to_version < 0:
        raise MigrationError(f"to_version must be a non-negative integer, not {to_version!r}")
    table = _check_version_table(version_table)
    chain = {m.version: m for m in discover(migrations_dir)}
    removed: list[int] = []
    with connect(url=url) as conn, conn.transaction():
        _lock_chain(conn, version_table)
        for version in sorted(_applied(conn, table), reverse=True):
            if version <= to_version:
                break
            migration = chain.get(version)
            if migration is None or migration.down is None:
                raise MigrationError(f"migration {version:04d} has no .down.sql; cannot downgrade past it")
            log.info("reverting migration %04d_%s", version, migration.name)
            conn.execute(migration.down.read_text())
            conn.execute(sql.SQL("DELETE FROM {} WHERE version = %s").format(table), (version,))
            removed.append(version)
    return removed


def schema_version(conn: Conn, version_table: str = DEFAULT_VERSION_TABLE) -> int:
    """The highest applied version, 0 when the ledger does not exist yet."""
    table = _check_version_table(version_table)
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS ok", (version_table,)).fetchone()
    if not exists or not exists["ok"]:
        return 0
    row = conn.execute(sql.SQL("SELECT coalesce(max(version), 0) AS v FROM {}").format(table)).fetchone()
    return int(row["v"]) if row else 0


def latest_version(migrations_dir: Path | None = None) -> int:
    chain = discover(migrations_dir)
    return chain[-1].version if chain else 0


def wait_for_schema(
    min_version: int | None = None,
    timeout: float | None = None,
    *,
    version_table: str = DEFAULT_VERSION_TABLE,
    url: str | None = None,
    sleep_fn: Callable[[float], None] = time.sleep,
    now_fn: Callable[[], float] = time.monotonic,
) -> int:
    """Block until the schema reaches `min_version` (default: this package's latest)."""
    wanted = latest_version() if min_version is None else min_version
    budget = config.current().settings.schema_wait_seconds if timeout is None else timeout
    deadline = now_fn() + budget
    last_error: Exception | None = None
    while True:
        try:
            with connect(autocommit=True, url=url) as conn:
                version = schema_version(conn, version_table)
            if version >= wanted:
                return version
            last_error = None
        except psycopg.OperationalError as exc:
            version, last_error = 0, exc
        if now_fn() >= deadline:
            detail = f" (last error: {last_error})" if last_error else f" (at version {version})"
            raise SchemaNotReadyError(
                f"schema did not reach version {wanted} within {budget:g}s{detail}; is the orchestrator running?"
            )
        sleep_fn(0.5)
