"""Test Postgres, in order: QW_TEST_DATABASE_URL; a testcontainers Postgres when a Docker
engine answers and has the image locally; otherwise an embedded pgserver.

The session migrates one template database (the engine chain and the test app's chain); each
test that asks for `database_url` gets a database of its own copied from it (CREATE DATABASE ...
TEMPLATE, tens of milliseconds) and dropped after, so no test can see another's rows, and the
processes it starts see only its own. Under pytest-xdist each worker has its own server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import qw_test_app
from procs import TEST_INGEST_QUEUES, TEST_NODE_PACKAGES, PrivatePostgres, Procs, postgres_data_parent
from psycopg import conninfo, sql

import queue_workflows
from queue_workflows import config, db, schedule, tasks, testing
from queue_workflows.dag import hooks as dag_hooks
from queue_workflows.gpu import registry as model_registry

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
os.environ["QW_NODE_PACKAGES"] = TEST_NODE_PACKAGES  # every configure() in a test reads it, as a deployment would
os.environ["QW_ORCHESTRATOR_METRICS_PORT"] = "0"  # several orchestrators share this host; a test that wants the endpoint picks a port
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    # The suite starts ~1,000 Python processes (services, CLIs, snippets); with no bytecode cache
    # each compiled the engine anew (~0.3 s of CPU apiece). They keep it outside the source tree.
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), f"qw-test-pycache-{os.getuid()}"))

TESTS_DIR = Path(__file__).resolve().parent
APP_MIGRATIONS = TESTS_DIR / "apps" / "app_migrations"
APP_VERSION_TABLE = "test_app_schema_version"
TEMPLATE_LOCK_KEY = 0x51577E  # an advisory lock on the server's admin database, held while a template migrates
# A throwaway server need not survive a power cut: no flush to disk on commit or checkpoint.
# (A Postgres crash loses nothing with these off; only the OS crashing would.)
FAST_SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
DOCKER_IMAGE = os.environ.get("QW_TEST_PG_IMAGE", "postgres:16-alpine")


def _testcontainers_url() -> tuple[str, object] | None:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.images.get(DOCKER_IMAGE)  # never pull: an air-gapped engine would hang on it
    except Exception:  # noqa: BLE001 - no engine, no image: fall through to pgserver
        return None
    try:
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer(DOCKER_IMAGE, driver=None)
        container.start()
        return container.get_connection_url(), container
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"Docker answered but the Postgres container did not start ({exc}); using pgserver", stacklevel=2)
        return None


DEFAULT_XDIST_WORKERS = 4
"""Most tests wait on processes and Postgres rather than compute: on 2 cores 4 workers run the suite in ~4:40 (6 take ~4:10 but lose load races more often)."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): parallel by default; soaks and the container stack serially.

    The e2e tests share one compose stack per session and run in file order; the soaks measure
    chaos on a quiet machine. PYTEST_XDIST_AUTO_NUM_WORKERS overrides the default.
    """
    markexpr = config.getoption("markexpr") or ""
    if "e2e" in markexpr or "soak" in markexpr:
        return 0
    return int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or DEFAULT_XDIST_WORKERS)


def pytest_configure(config: pytest.Config) -> None:
    """`--dist loadfile` hands out files in collection order, not xdist's default of most tests first.

    That default started the real-process files (a few long tests each: the browser test, the
    Postgres restarts) last, so one worker ran on alone at the end; the order comes from
    `_longest_files_first` instead.
    """
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist >= 3.6
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soaks run only when asked for (`pytest -m soak`), so the default run stays short.

    Under xdist the files with the most real-process tests are handed out first, so the long
    ones do not start last and leave one worker running while the others wait.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _longest_files_first(items)
    if "soak" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="soak test: run it with `pytest -m soak` (.ci/run does)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def _longest_files_first(items: list[pytest.Item]) -> None:
    """Stable sort by file: most `multiprocess` tests first (every worker collects the same order)."""
    real_process_tests: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        real_process_tests[path] = real_process_tests.get(path, 0) + ("multiprocess" in item.keywords)
    position = {path: i for i, path in enumerate(real_process_tests)}

    def key(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        return -real_process_tests[path], position[path]

    items.sort(key=key)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    url = os.environ.get("QW_TEST_DATABASE_URL")
    if url:
        yield url
        return
    found = _testcontainers_url()
    if found is not None:
        url, container = found
        yield url
        container.stop()  # type: ignore[attr-defined]
        return
    import pgserver

    # Not under pytest's tmp dir: each new pytest session resets that to 0700, locking out the
    # unprivileged user pgserver runs Postgres as when the tests run as root.
    pgdata = Path(tempfile.mkdtemp(prefix="qw-test-pg-", dir=postgres_data_parent()))
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name, value in FAST_SERVER_SETTINGS.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")
    yield server.get_uri()
    server._cleanup()
    shutil.rmtree(pgdata, ignore_errors=True)


@pytest.fixture(scope="session")
def template_database_name(pg_server_url: str) -> Iterator[str]:
    """A database with both migration chains applied, which tests copy and never connect to."""
    url = testing.create_database(pg_server_url, "qw_template")
    # xdist workers sharing one server (QW_TEST_DATABASE_URL) migrate one at a time: the chain
    # creates the cluster-wide process roles, which two creators at once would collide on.
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(%s)", (TEMPLATE_LOCK_KEY,))
        db.bootstrap(url=url)
        db.bootstrap(url=url, migrations_dir=APP_MIGRATIONS, version_table=APP_VERSION_TABLE)
    db.close_pools()  # CREATE DATABASE ... TEMPLATE refuses a template anyone is connected to
    yield str(conninfo.conninfo_to_dict(url)["dbname"])
    testing.drop_database(pg_server_url, url)


@pytest.fixture(autouse=True)
def _fresh_engine_state() -> Iterator[None]:
    config.reset()
    tasks.clear_ingest_tasks()
    schedule.clear_ingest_schedule()
    dag_hooks.reset()
    model_registry.reset()
    yield
    config.reset()
    tasks.clear_ingest_tasks()
    schedule.clear_ingest_schedule()
    dag_hooks.reset()
    model_registry.reset()


@pytest.fixture
def database_url(pg_server_url: str, template_database_name: str) -> Iterator[str]:
    """A migrated database of this test's own, and the engine configured to use it."""
    name = f"qw_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        # Nearly every test makes a copy: FILE_COPY takes about half the time of the default
        # (WAL_LOG, Postgres 15+) where its checkpoints flush nothing to disk (fsync off).
        fast = admin.info.server_version >= 150000 and admin.execute("SHOW fsync").fetchone() == ("off",)
        strategy = sql.SQL(" STRATEGY FILE_COPY") if fast else sql.SQL("")
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(sql.Identifier(name), sql.Identifier(template_database_name), strategy))
    url = conninfo.make_conninfo(pg_server_url, dbname=name)
    queue_workflows.configure(database_url=url, ingest_queues=TEST_INGEST_QUEUES, gpu_cpu_fallback=True)
    yield url
    db.close_pools()
    testing.drop_database(pg_server_url, url)  # WITH (FORCE): a process the test left running is cut off


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with db.connect(autocommit=True, url=database_url) as c:
        yield c


@pytest.fixture
def worker_url(database_url: str) -> Iterator[str]:
    """A login role that is only a member of qw_worker, as the stack's workers are."""
    role = f"qw_w_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE qw_worker").format(sql.Identifier(role)))
    try:
        yield conninfo.make_conninfo(database_url, user=role)
    finally:
        db.close_pools()
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND datname = current_database()", (role,)
            )
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def scratch_database_url(pg_server_url: str) -> Iterator[str]:
    """An empty database of its own, for migration tests."""
    url = testing.create_database(pg_server_url, "qw_scratch")
    yield url
    testing.drop_database(pg_server_url, url)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    running = Procs(tmp_path)
    yield running
    running.stop_all()


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A Postgres of the test's own, which it may stop and start."""
    # Not under tmp_path: every pytest session that starts (other people's runs on the same
    # machine included) chmods /tmp/pytest-of-<user> back to 0700, and the unprivileged
    # `pgserver` user that runs initdb and pg_ctl when we are root then loses its way in.
    base = Path(tempfile.mkdtemp(prefix="qw-pg-restart-", dir=postgres_data_parent()))
    try:
        server = PrivatePostgres(base / "pg")
        try:
            yield server
        finally:
            server.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def private_database_url(private_pg: PrivatePostgres) -> Iterator[str]:
    with psycopg.connect(private_pg.admin_url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE qw_restart")
    url = private_pg.server.get_uri("qw_restart")
    db.bootstrap(url=url)
    db.bootstrap(url=url, migrations_dir=APP_MIGRATIONS, version_table=APP_VERSION_TABLE)
    queue_workflows.configure(database_url=url, ingest_queues=TEST_INGEST_QUEUES)
    tasks.register_ingest_task("record", qw_test_app.record)
    yield url
