"""The `pooler` profile (deploy/compose.pooler.yaml): docs/poolers.md's "PgBouncer in the compose
stack" run as written on a head set up as README.md's compose block sets one up (its secrets and
TLS; one `up`, the section's own). Through the real PgBouncer image: the example app's producer
enqueues over TLS with SCRAM, `qw` reads, a worker refuses with its one line and exit 80, the
dashboard reads, and producers enqueueing through a PgBouncer restart lose nothing and run
nothing twice. The tests run in order on one head; the last takes it down.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from e2e_support import ROOT, engine_problem, poll, rows, rows_or_none
from operator_docs import Block, Host, clean_env, copy_of_the_repository, section_blocks, shell_blocks

import queue_workflows
import qw_demo
from queue_workflows import db, node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SECTION = "## PgBouncer in the compose stack"
IMAGE = "qw-pooler/pgbouncer:1.18"
REFUSAL = ("error: QW_DATABASE_URL points at a transaction-mode pooler (the session did not keep one Postgres backend "
           "across transactions: backend ")
ACKED_AFTER_RESTART = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def blocks() -> list[Block]:
    found = section_blocks("docs/poolers.md", SECTION)
    assert len(found) == 4, [b.where for b in found]  # up; demo and qw; the worker's refusal; the restart
    return found


class PoolerHead(Host):
    def pooled_url(self, role: str = "worker", **extra: str) -> str:
        """This machine's DSN through the published PgBouncer port: TLS verify-full for the name `pgbouncer`, SCRAM only."""
        port = self.compose("port", "pgbouncer", "6432").stdout.strip().rsplit(":", 1)[1]
        password = (self.repo / "deploy" / "secrets" / f"{role}_db_password").read_text().strip()
        params = {"host": "pgbouncer", "hostaddr": "127.0.0.1", "port": port, "dbname": "qw", "user": f"qw_{role}",
                  "password": password, "sslmode": "verify-full", "sslrootcert": str(self.repo / "deploy" / "ca" / "ca.crt"),
                  "require_auth": "scram-sha-256", "connect_timeout": "5"}
        return psycopg.conninfo.make_conninfo(**{**params, **extra})

    def direct_url(self, role: str = "orchestrator") -> str:
        port = self.compose("port", "postgres", "5432").stdout.strip().rsplit(":", 1)[1]
        password = (self.repo / "deploy" / "secrets" / f"{role}_db_password").read_text().strip()
        return psycopg.conninfo.make_conninfo(host="127.0.0.1", port=port, dbname="qw", user=f"qw_{role}", password=password,
                                              connect_timeout="5")


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolerHead]:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    started = time.monotonic()
    flags = os.environ.get("QW_BUILD_FLAGS", "").split()
    subprocess.run(["docker", "build", *flags, "-q", "-t", IMAGE, "."], cwd=ROOT / "deploy" / "pgbouncer", check=True,
                   capture_output=True, timeout=900)
    print(f"\n{IMAGE} (deploy/pgbouncer/Dockerfile): {time.monotonic() - started:.1f}s")
    host = PoolerHead("pooler-head", copy_of_the_repository(tmp_path_factory.mktemp("pooler") / "repo"), clean_env(
        COMPOSE_PROJECT_NAME=f"{os.environ.get('QW_E2E_PROJECT_PREFIX', 'qwe2e')}pool{uuid.uuid4().hex[:6]}",
        QW_IMAGE_TAG=os.environ.get("QW_IMAGE_TAG", "latest"),
        QW_DB_PUBLISH=f"127.0.0.1:{free_port()}",
        QW_PGBOUNCER_PUBLISH=f"127.0.0.1:{free_port()}",
        QW_METRICS_PUBLISH="127.0.0.1:",
        QW_DASHBOARD_PUBLISH="127.0.0.1:",
        QW_SHUTDOWN_GRACE_SECONDS="5",
        QW_STOP_GRACE_PERIOD="15s",
    ))
    # README.md's compose block up to its first `docker compose`: the head's .env, secrets and TLS.
    [readme] = [b for b in shell_blocks() if b.doc == "README.md"]
    setup = "\n".join(line for line in readme.code.splitlines() if not line.startswith("docker compose"))
    try:
        host.run(setup, "README.md's setup")
        yield host
    finally:
        db.close_pools()
        host.down()
        print(f"\npooler e2e, container stage: {time.monotonic() - started:.1f}s ({host.seconds})")


def test_the_section_turns_the_pooler_on(head):
    up = blocks()[0]
    head.run(up.code, up.where, timeout=600)
    print(f"\n{up.where}: {head.seconds[up.where]:.1f}s")
    assert "COMPOSE_PROFILES=head,cpu,pooler" in (head.repo / ".env").read_text().splitlines()
    env = {name: head.compose("exec", "-T", name, "printenv", "QW_DATABASE_URL").stdout.strip()
           for name in ("dashboard", "orchestrator", "scheduler", "ingest-worker")}
    assert "@pgbouncer:6432/" in env["dashboard"], env
    assert all("@postgres:5432/" in env[name] for name in ("orchestrator", "scheduler", "ingest-worker")), env
    # Postgres's own keepalives on a TCP session (compose.yaml): a silent peer is dropped in ~25 s.
    keepalives = rows(head.direct_url(), "SELECT current_setting('tcp_keepalives_idle') AS idle, current_setting('tcp_keepalives_interval')"
                      " AS interval, current_setting('tcp_keepalives_count') AS count, current_setting('tcp_user_timeout') AS user_timeout")
    assert keepalives == [{"idle": "10", "interval": "5", "count": "3", "user_timeout": "25000"}], keepalives


def test_the_example_app_and_qw_go_through_pgbouncer_over_tls_with_scram(head):
    through = blocks()[1]
    ran = head.run(through.code, through.where, timeout=300)
    assert "demo enqueued {'ingest_jobs': 10" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "leader" in ran.stdout, ran.stdout[-2000:]
    # The demo (qw_worker) and qw (qw_orchestrator) logged in to PgBouncer over TLS; its sessions on Postgres are TLS too.
    logs = head.compose("logs", "--no-color", "pgbouncer").stdout
    for role in ("qw_worker", "qw_orchestrator"):
        assert f"login attempt: db=qw user={role} tls=TLS" in logs, logs[-3000:]
    seen = rows(head.direct_url(), "SELECT a.usename, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)"
                " WHERE a.datname = current_database() AND a.client_addr = %s::inet", (pgbouncer_address(head),))
    assert seen and all(r["ssl"] for r in seen), seen
    done = lambda: rows_or_none(head.direct_url(), "SELECT status, count(*) AS n FROM ingest_jobs_all WHERE reason = 'demo' GROUP BY status")  # noqa: E731
    settled = poll("the demo's jobs to complete", lambda: (found := done()) and [r["status"] for r in found] == ["completed"] and found, 120)
    assert settled[0]["n"] == 10


def test_clients_get_in_only_with_scram_and_tls(head):
    # From this machine: verify-full for the name `pgbouncer`, and libpq refuses any exchange but SCRAM.
    with psycopg.connect(head.pooled_url(), autocommit=True, prepare_threshold=None) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)
    wrong = head.pooled_url().replace("password=", "password=not-")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed|SASL authentication failed"):
        psycopg.connect(wrong, autocommit=True).close()
    with pytest.raises(psycopg.OperationalError, match="SSL"):
        psycopg.connect(head.pooled_url(sslmode="disable"), autocommit=True).close()


def test_a_worker_pointed_at_pgbouncer_exits_80_with_one_line(head):
    refused = blocks()[2]
    ran = head.run(refused.code, refused.where, timeout=300)
    lines = (ran.stdout + ran.stderr).splitlines()
    said = [line for line in lines if line.startswith(REFUSAL)]
    assert len(said) == 1 and said[0].endswith("producers, the dashboard and qw may stay on the pooler"), lines[-20:]
    assert "exit code 80" in lines, lines[-20:]


class Producer:
    """Enqueues token after token through PgBouncer; a failed enqueue is retried under its dedup key (docs/poolers.md)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.acked: list[str] = []
        self.tried: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            n = 0
            while not self.stop.is_set():
                token = f"{self.name}-{n}"
                self.tried.append(token)
                while not self.stop.is_set():
                    try:
                        node_queue.enqueue_ingest_job("demo.fetch_page", "fetch", {"url": f"https://pgb.invalid/{token}"},
                                                      reason="pooler-e2e", dedup_key=token)
                        self.acked.append(token)
                        break
                    except psycopg.OperationalError as exc:  # PgBouncer away for a moment
                        self.errors.append(type(exc).__name__)
                        time.sleep(0.05)
                n += 1
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failed = exc


def test_a_pgbouncer_restart_under_load_loses_nothing_and_runs_nothing_twice(head):
    restart = blocks()[3]
    queue_workflows.configure(database_url=head.pooled_url(), ingest_queues=frozenset({"fetch", "load"}))
    queue_workflows.register_ingest_task("demo.fetch_page", qw_demo.fetch_page)
    producers = [Producer(f"p{i}") for i in range(3)]
    for producer in producers:
        producer.thread.start()
    try:
        poll("load before the restart", lambda: sum(len(p.acked) for p in producers) >= 60 or any(p.failed for p in producers), 60)
        before = sum(len(p.acked) for p in producers)
        head.run(restart.code, restart.where, timeout=120)
        print(f"\n{restart.where}: {head.seconds[restart.where]:.1f}s under load")
        poll("enqueues to go on after the restart", lambda: sum(len(p.acked) for p in producers) >= before + ACKED_AFTER_RESTART
             or any(p.failed for p in producers), 60)
    finally:
        for producer in producers:
            producer.stop.set()
        for producer in producers:
            producer.thread.join(timeout=30)
        db.close_pools()
    assert [p.failed for p in producers if p.failed] == []
    # The restart stopped PgBouncer with its safe shutdown (the image's STOPSIGNAL), not the immediate one.
    logs = head.compose("logs", "--no-color", "pgbouncer").stdout
    assert "got SIGINT, shutting down" in logs and "got SIGTERM" not in logs, logs[-3000:]
    errors = [e for p in producers for e in p.errors]
    assert errors, "no producer saw the restart: it did not happen under load"
    acked = {t for p in producers for t in p.acked}
    # Every token a producer finished with: acknowledged; a retry under the same key never wrote a second job.
    intended = {t for p in producers for t in p.tried if t in p.acked or t != p.tried[-1]}
    url = head.direct_url()

    def settled() -> list[dict] | None:
        found = rows_or_none(url, "SELECT dedup_key, status, attempts FROM ingest_jobs_all WHERE reason = 'pooler-e2e'")
        return found if found is not None and len(found) >= len(acked) and all(r["status"] == "completed" for r in found) else None

    try:
        jobs = poll("every acknowledged enqueue to complete", settled, 120, 0.5)
    except AssertionError:
        found = rows(url, "SELECT status, count(*) AS n FROM ingest_jobs_all WHERE reason = 'pooler-e2e' GROUP BY 1")
        raise AssertionError(f"{len(intended)} enqueued, {len(acked)} acknowledged; in the table: {found}") from None
    keys = [j["dedup_key"] for j in jobs]
    print(f"PgBouncer restart under load: {len(acked)} acknowledged, {len(errors)} failed tries ({sorted(set(errors))})")
    assert sorted(set(keys)) == sorted(keys), "one enqueue was written twice"
    assert set(keys) >= intended, f"acknowledged or retried enqueues missing: {sorted(intended - set(keys))[:10]}"
    assert set(keys) <= {t for p in producers for t in p.tried}
    assert [j for j in jobs if j["attempts"] != 1] == [], "a job was claimed (run) more than once"


def test_the_dashboard_reads_through_pgbouncer(head):
    port = head.compose("port", "dashboard", "8765").stdout.strip().rsplit(":", 1)[1]

    def page() -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
                return response.read().decode() if response.status == 200 else None
        except OSError:
            return None

    body = poll("the dashboard's page", page, 90, 1)
    assert "head" in body  # head.env's QW_HOST_LABEL, the label of the stack's workers
    # As qw_dashboard, which sees its own sessions' addresses: every one but this query's comes from PgBouncer.
    sessions = rows(head.direct_url("dashboard"), "SELECT host(client_addr) AS addr FROM pg_stat_activity"
                    " WHERE datname = current_database() AND usename = 'qw_dashboard' AND pid <> pg_backend_pid()")
    assert sessions and {s["addr"] for s in sessions} == {pgbouncer_address(head)}, sessions
    assert "login attempt: db=qw user=qw_dashboard tls=TLS" in head.compose("logs", "--no-color", "pgbouncer").stdout


def test_the_head_comes_down_and_leaves_nothing(head):
    head.down()
    assert head.left_over() == []


def pgbouncer_address(head: PoolerHead) -> str:
    container = head.compose("ps", "-q", "pgbouncer").stdout.strip()
    return subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container],
                          capture_output=True, text=True, check=True).stdout.strip()


