"""Real worker/orchestrator processes for multi-process tests, with bounded polling waits."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from queue_workflows import testing

T = TypeVar("T")
# The ingest queues the test configuration names (here, not in conftest: a test importing
# `conftest` by name would get whichever conftest.py pytest loaded last, e.g. tests/e2e's).
TEST_INGEST_QUEUES = frozenset({"fetch", "load", "alpha", "beta"})
# The packages whose modules the tests' node jobs may run (QW_NODE_PACKAGES): set for the whole
# test session (conftest) and for every service process a test starts.
TEST_NODE_PACKAGES = "qw_test_nodes,qw_dag_nodes,qw_dag_cancel_nodes,qw_gpu_nodes,qw_poison_nodes,qw_demo,qw_map_nodes,qw_log_app"
# The helper apps (QW_APP=qw_test_app, the node packages) a service process imports by name.
APPS_DIR = Path(__file__).resolve().parents[1] / "apps"


def wait_until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """`testing.wait_until`, failing the test (AssertionError) rather than raising TimeoutError."""
    try:
        return testing.wait_until(predicate, timeout=timeout, interval=interval, what=what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def service_env(database_url: str, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_")}
    env.update(
        QW_DATABASE_URL=database_url,
        QW_APP="qw_test_app",
        QW_INGEST_QUEUES="fetch,load,alpha,beta",
        QW_LOG_LEVEL="INFO",
        QW_GPU_CPU_FALLBACK="1",  # no GPU here: gpu workers run their jobs on the CPU
        QW_NODE_PACKAGES=TEST_NODE_PACKAGES,
        QW_ORCHESTRATOR_METRICS_PORT="0",  # tests run several orchestrators on one host; one that serves metrics picks a free port
        PYTHONPATH=os.pathsep.join(filter(None, [str(APPS_DIR), env.get("PYTHONPATH", "")])),
    )
    env.update(overrides)
    return env


class Procs:
    """Tracks every process a test starts and kills whatever is left at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}-{len(self.started)}.log", "wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = Path(log.name)  # type: ignore[attr-defined]
        self.started.append(proc)
        return proc

    def worker(self, env: dict[str, str], queue: str, *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn(f"worker-{queue}", [sys.executable, "-m", "qw_services.worker", f"--queue={queue}", *extra], env)

    def orchestrator(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        return self._spawn("orchestrator", [sys.executable, "-m", "qw_services.orchestrator"], env)

    def scheduler(self, env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn("scheduler", [sys.executable, "-m", "queue_workflows.scheduler", *extra], env)

    def hw_metrics(self, env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
        return self._spawn("hw-metrics", [sys.executable, "-m", "qw_services.hw_metrics", *extra], env)

    def logs(self) -> str:
        parts = []
        for proc in self.started:
            path = getattr(proc, "log_path", None)
            if path and path.exists():
                parts.append(f"--- {path.name} (rc={proc.poll()}) ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.started:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- helpers shared by the multi-process tests (test_multiprocess_*.py) ---------------------


def query(url: str, statement: str, params: object = None) -> list[dict]:
    """Run one statement on a fresh autocommit connection; rows as dicts ([] when none)."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=5) as conn:
        cur = conn.execute(statement, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def query_or_none(url: str, statement: str, params: object = None) -> list[dict] | None:
    """Like `query`, but None while the server is unreachable (for polling across an outage)."""
    import psycopg

    try:
        return query(url, statement, params)
    except psycopg.OperationalError:
        return None


def pid_of(worker_id: str) -> int:
    """The process id inside a worker id (`host:queue:pid:suffix`)."""
    return int(worker_id.rsplit(":", 2)[1])


def log_text(proc: subprocess.Popen[bytes]) -> str:
    path = getattr(proc, "log_path", None)
    return path.read_text(errors="replace") if path and path.exists() else ""


def wait_for_log(proc: subprocess.Popen[bytes], text: str, *, timeout: float) -> None:
    wait_until(lambda: text in log_text(proc) or proc.poll() is not None, timeout=timeout, what=f"{text!r} in the log")
    assert text in log_text(proc), f"process exited (rc={proc.poll()}) before logging {text!r}:\n{log_text(proc)[-3000:]}"


def wait_exit(proc: subprocess.Popen[bytes], timeout: float, procs: Procs) -> int:
    """The process's exit code; fails the test with every log if it is still running after `timeout`."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"process {proc.pid} did not exit within {timeout}s\n{procs.logs()}") from None


def wait_workers_ready(url: str, workers: list[subprocess.Popen[bytes]], *, timeout: float = 30.0) -> dict[int, dict]:
    """Wait until every worker has a heartbeat row (it is connected, holds its lock and LISTENs)."""
    wanted = {w.pid for w in workers}

    def ready() -> dict[int, dict] | None:
        dead = [w for w in workers if w.poll() is not None]
        assert not dead, f"worker(s) {[w.pid for w in dead]} exited during startup"
        rows = query(url, "SELECT * FROM worker_heartbeats WHERE pid = ANY(%s)", (list(wanted),))
        by_pid = {r["pid"]: r for r in rows}
        return by_pid if set(by_pid) == wanted else None

    return wait_until(ready, timeout=timeout, interval=0.1, what=f"workers {sorted(wanted)} to be ready")


SHM_DIR = Path("/dev/shm")
SHM_MIN_FREE_BYTES = 2 << 30


def postgres_data_parent() -> str | None:
    """Where a throwaway server's data directory goes: /dev/shm (tmpfs) where it has room, else the temp dir.

    Each per-test CREATE DATABASE writes the template's ~1,500 files anew; on ext4 its inode
    allocator (scanning recently deleted inodes) made that ~160 ms of CPU per test, on tmpfs ~17 ms.
    """
    try:
        free = shutil.disk_usage(SHM_DIR).free
    except OSError:
        return None
    return str(SHM_DIR) if free >= SHM_MIN_FREE_BYTES and os.access(SHM_DIR, os.W_OK) else None


# A throwaway server need not survive a power cut (conftest's FAST_SERVER_SETTINGS): written by
# initdb, so its migrations and the stops and starts of the tests run without a flush to disk.
PRIVATE_INITDB_ARGS = ["--no-sync", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]


class PrivatePostgres:
    def __init__(self, pgdata: Path) -> None:
        from unittest import mock

        import pgserver
        from pgserver import postgres_server

        initdb = postgres_server.initdb
        with mock.patch.object(postgres_server, "initdb", lambda args, **kw: initdb([*PRIVATE_INITDB_ARGS, *args], **kw)):
            self.server = pgserver.get_server(pgdata, cleanup_mode="stop")
        info = self.server.get_postmaster_info()
        self.socket_dir = info.socket_dir
        self.admin_url = self.server.get_uri()

    def _pg_ctl(self, *args: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(list(args), pgdata=self.server.pgdata, user=self.server.system_user, timeout=60)

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start(self, listen: str = "") -> None:
        # `pg_ctl start` does not reuse postmaster.opts: pass pgserver's own options again
        # (no TCP listener unless `listen` names an address, the same unix-socket directory) so every DSN stays valid.
        self._pg_ctl("-w", "-o", f'-h "{listen}"', "-o", f"-k {self.socket_dir}", "-l", str(self.server.log), "start")
        from pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.server.pgdata)
        assert info is not None and info.is_running() and info.socket_dir == self.socket_dir, info
        self.server._postmaster_info = info  # so pgserver's own cleanup stops the new postmaster

    def close(self) -> None:
        import atexit

        import psutil

        atexit.unregister(self.server._cleanup)
        try:
            self.server._cleanup()
        except psutil.NoSuchProcess:
            pass  # a test stopped this server itself; pgserver's kill found no postmaster left
        finally:
            from pgserver.utils import PostmasterInfo

            info = PostmasterInfo.read_from_pgdata(self.server.pgdata)
            if info is not None and info.is_running():
                self._pg_ctl("-w", "-m", "immediate", "stop")
