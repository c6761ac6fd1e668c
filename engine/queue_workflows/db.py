"""Connections and the migration chain (bootstrap, downgrade, wait_for_schema)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from queue_workflows import config, errors, migrations, pooler
from queue_workflows.db_network import network_timeouts
from queue_workflows.db_pool import FollowingPool
from queue_workflows.errors import ConfigError, DatabaseUnreachableError, MigrationError, QueueWorkflowsError, SchemaNotReadyError

log = logging.getLogger(__name__)

Conn = psycopg.Connection[dict[str, Any]]
"""Every engine connection returns rows as dicts."""

DEFAULT_VERSION_TABLE = "queue_schema_version"
_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_pools: dict[str, ConnectionPool[Conn]] = {}
_pools_lock = threading.Lock()


def connect(*, autocommit: bool = False, url: str | None = None) -> Conn:
    """A new connection with dict rows and the network deadlines (db_network.py); the caller closes it.
    No server-side prepared statements through a transaction pooler."""
    url = url or config.current().database_url()
    return psycopg.connect(url, autocommit=autocommit, row_factory=dict_row, prepare_threshold=None if pooler.known_transaction_pooled(url) else 5,
                           **network_timeouts(url, config.current().settings.db_network_timeout_seconds))


def pool() -> ConnectionPool[Conn]:
    """The process's shared pool for the configured database, opened on first use."""
    cfg = config.current()
    url = cfg.database_url()
    with _pools_lock:
        existing = _pools.get(url)
        if existing is None:
            # One direct connection first: a missing database is one clear error now, not a
            # pool that retries in the background until its 30 s checkout timeout.
            try:
                connect(url=url).close()
                prepare = None if pooler.is_transaction_pooled(url) else 5  # a statement prepared on one backend is unknown to the next
            except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
                raise connect_error(exc) from None
            existing = FollowingPool(
                url,
                connection_class=psycopg.Connection[dict[str, Any]],
                min_size=1,
                max_size=cfg.settings.pool_max_size,
                kwargs={"row_factory": dict_row, "prepare_threshold": prepare, **network_timeouts(url, cfg.settings.db_network_timeout_seconds)},
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
    try:
        if conn is not None:
            yield conn
            return
        with pool().connection() as pooled:
            yield pooled
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaNotReadyError(f"{str(exc).strip().splitlines()[0]}: the queue_workflows schema is missing; {MIGRATE_HINT}") from exc
    except psycopg.errors.DiskFull as exc:
        raise errors.DatabaseFullError(f"Postgres is out of disk space ({str(exc).strip().splitlines()[0]}): nothing was written; "
                                "free space on the database server, then retry (docs/poolers.md)") from exc


def one_round_trip(conn: Conn, statements: Sequence[tuple[Any, Any]]) -> list[psycopg.Cursor[Any]]:
    """BEGIN, `statements`, COMMIT sent as one pipeline on an autocommit connection: one round trip.

    psycopg's `transaction()` inside a pipeline syncs at its edges (a third slower per job); an
    explicit BEGIN/COMMIT does not. On any error the transaction is rolled back before raising.
    The cursors are read after the commit.
    """
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            cursors = [conn.execute(query, params) for query, params in statements]
            conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        raise
    return cursors


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
    return {row["version"] for row in conn.execute(sql.SQL("SELECT version FROM {}").format(table))}


def _lock_ledger(conn: Conn, table: sql.Identifier) -> None:
    """Serialize migrators on the ledger: EXCLUSIVE needs a write grant there (an advisory lock needs none)."""
    ddl = "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    try:
        with conn.transaction():  # a savepoint: a racing first migrator's commit fails only this
            conn.execute(sql.SQL(ddl).format(table))
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
        pass  # that migrator created the ledger and committed while ours waited on its catalog row
    conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(table))


def bootstrap(
    *,
    migrations_dir: Path | None = None,
    version_table: str = DEFAULT_VERSION_TABLE,
    url: str | None = None,
) -> list[int]:
    """Apply every migration not yet in the ledger, in one transaction holding the ledger locked.

    Idempotent and safe to call from several processes at once; returns the versions applied.
    """
    table = _check_version_table(version_table)
    chain = discover(migrations_dir)
    applied_now: list[int] = []
    with connect(url=url) as conn, conn.transaction():
        _lock_ledger(conn, table)
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
    latest = latest_version(migrations_dir)
    if isinstance(to_version, int) and not isinstance(to_version, bool) and to_version > latest:
        raise MigrationError(f"cannot downgrade to {to_version}: the latest migration is {latest}")
    if not isinstance(to_version, int) or to_version < 0:
        raise MigrationError(f"to_version must be a non-negative integer, not {to_version!r}")
    table = _check_version_table(version_table)
    chain = {m.version: m for m in discover(migrations_dir)}
    removed: list[int] = []
    with connect(url=url) as conn, conn.transaction():
        _lock_ledger(conn, table)
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
    stop: threading.Event | None = None,
    sleep_fn: Callable[[float], None] | None = None,
    now_fn: Callable[[], float] = time.monotonic,
) -> int:
    """Block until the schema reaches `min_version` (default: this package's latest).

    Waits through what time may cure (in a compose stack Postgres and the orchestrator's
    migrations come up later) and raises ConfigError at once for what it cannot (malformed
    DSN, missing database, refused login). Returns early, with the version seen so far, once
    `stop` is set, so a worker waiting here still honours SIGTERM/SIGINT at once.
    """
    wanted = latest_version() if min_version is None else min_version
    budget = config.current().settings.schema_wait_seconds if timeout is None else timeout
    started = now_fn()
    deadline = started + budget
    sleep = sleep_fn or (stop.wait if stop is not None else time.sleep)
    version, last_error, said, warned = 0, None, "", False
    while stop is None or not stop.is_set():
        try:
            with connect(autocommit=True, url=url) as conn:
                version = schema_version(conn, version_table)
            if version >= wanted:
                return version
            last_error, note = None, f"database is at schema version {version}, waiting for {wanted}: {MIGRATE_HINT}"
        except psycopg.Error as exc:
            problem = connect_error(exc, url=url)
            if not isinstance(problem, DatabaseUnreachableError):
                raise problem from None
            last_error, note = problem, f"waiting for Postgres: {problem}"
        loud = now_fn() - started >= SCHEMA_WAIT_QUIET_SECONDS  # a stack starting up waits a little, quietly
        if note != said or (loud and not warned):
            log.log(logging.WARNING if loud else logging.INFO, "%s", note)
            said, warned = note, warned or loud
        if now_fn() >= deadline:
            detail = f": {last_error}" if last_error else f" (database at version {version}); {MIGRATE_HINT}"
            # The cause tells a tool's exit code apart: unreachable (1) or unmigrated (2).
            raise SchemaNotReadyError(f"schema did not reach version {wanted} within {budget:g}s{detail}") from last_error
        sleep(0.5)
    return version


# --- connect-time problems, described once for every tool ---------------------------------

SCHEMA_WAIT_QUIET_SECONDS = 5.0
MIGRATE_HINT = "run `qw migrate` (or start `queue-orchestrator`, which applies migrations)"
_WAIT_CURES = ("the database system is starting up", "the database system is shutting down", "the database system is in recovery mode",
               "the database system is not yet accepting connections", "too many clients", "remaining connection slots")
_LOGIN_REFUSED = ("password authentication failed", "authentication failed", "no pg_hba.conf entry", "role ", "password")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text.split("Is the server running", 1)[0].strip() or type(exc).__name__


def _redact(text: str, dsn: str) -> str:
    """libpq echoes a malformed DSN back: keep its password out of logs and terminals."""
    for secret in re.findall(r"[^:/@\s]*:([^@\s/]+)@", dsn) + re.findall(r"password\s*=\s*(\S+)", dsn):
        text = text.replace(secret, "***")
    return text


def _dsn_source(url: str | None) -> str:
    """The variable the user sets to fix the DSN: QW_DATABASE_URL, or the app's `db_url_env`."""
    try:
        cfg = config.current()
        if url is None or url == cfg.database_url():
            return cfg.db_url_env
    except ConfigError:
        pass
    return "the database URL"


def _parse_dsn(url: str) -> tuple[dict[str, Any], str]:
    """The DSN's parameters, and what is wrong with it ('' when nothing)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        return {}, _redact(_one_line(exc), url)
    port = str(params.get("port") or "5432")
    bad_port = not all(p.strip().isdigit() for p in port.split(","))
    return params, f"port {port!r} is not a number" if bad_port else ""


# libpq's own complaints about an option's value ("invalid sslmode value", "invalid integer value
# ... for connection option", "invalid port number", ...), raised before any network traffic.
_BAD_OPTION = re.compile(r"invalid (\w+ )?value|invalid port number|invalid connection option|unrecognized (\w+ )?value|invalid \w+ value")
# libpq's TLS failures before any session: the server refuses TLS, the CA is missing or is not
# the server's, or the certificate does not name the host. Only a configuration change cures them.
_TLS_REFUSED = re.compile(
    r"server does not support SSL|root certificate file .* does not exist|could not read root certificate"
    r"|certificate verify failed|does not match host name|certificate (has expired|is not yet valid)",
    re.IGNORECASE,
)


def connect_error(exc: BaseException, *, url: str | None = None) -> QueueWorkflowsError:
    """The one-line error, naming cause and fix, for a failure to connect to Postgres.

    ConfigError when only a configuration change cures it (malformed DSN, missing database,
    refused login: exit 2); DatabaseUnreachableError when waiting may (Postgres not listening
    yet, starting up, out of slots: exit 1). libpq gives no SQLSTATE before the session
    exists, so the server's FATAL text is what tells them apart.
    """
    source = _dsn_source(url)
    try:
        dsn = url or config.current().database_url()
    except ConfigError as err:
        return err
    params, malformed = _parse_dsn(dsn)
    if malformed:
        return ConfigError(
            f"{source}: not a valid Postgres DSN ({malformed}); "
            "use postgresql://user:password@host:5432/dbname"
        )
    if not isinstance(exc, psycopg.OperationalError):
        return QueueWorkflowsError(_one_line(exc))  # not a connect-time failure
    host = str(params.get("host") or params.get("hostaddr") or "")
    where = f"{host}:{params.get('port') or 5432}" if host and not host.startswith("/") else f"socket {host or '(default)'}"
    dbname = str(params.get("dbname") or params.get("user") or "postgres")
    text = _one_line(exc)
    if _BAD_OPTION.search(text):  # libpq refused an option before connecting: no wait will cure it
        return ConfigError(f"{source}: not a valid Postgres DSN ({text}); fix that option")
    if _TLS_REFUSED.search(text):
        return ConfigError(
            f"{source}: TLS to Postgres at {where} failed ({text}); fix sslmode or sslrootcert in {source}, "
            "or the server's certificate (deploy/make-tls.sh)"
        )
    fatal = text.split("FATAL:", 1)[1].strip() if "FATAL:" in text else ""
    lowered = fatal.lower()
    if fatal and "database" in lowered and "does not exist" in lowered:
        return ConfigError(
            f"{source}: database {dbname!r} does not exist on {where}; create it "
            f"(createdb {dbname}) or point {source} at an existing database"
        )
    if fatal and not any(cure in lowered for cure in _WAIT_CURES):
        kind = "refused the login" if any(word in lowered for word in _LOGIN_REFUSED) else "refused the connection"
        return ConfigError(f"{source}: Postgres at {where} {kind} ({fatal}); fix the user/password or database in {source}")
    return DatabaseUnreachableError(f"cannot reach Postgres at {where} ({fatal or text}); start it, or fix {source}")


def check_database(*, url: str | None = None, schema: bool = True) -> int:
    """Connect once, and with `schema` require this package's migrations; returns the schema version.

    One-shot tools call this first: a bad DSN or an unmigrated database is one clear line, not a pool timeout.
    """
    try:
        with connect(autocommit=True, url=url) as conn:
            version = schema_version(conn)
    except psycopg.Error as exc:
        raise connect_error(exc, url=url) from None
    wanted = latest_version()
    if schema and version < wanted:
        raise ConfigError(f"database is at schema version {version}, this package needs {wanted}; {MIGRATE_HINT}")
    return version
