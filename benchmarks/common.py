"""Shared helpers for the benchmark scripts: the Postgres under test, databases, processes, stats.

Every script measures real processes against a real Postgres: a private pgserver under a temp
dir by default, or an existing server given by `--database-url` / QW_BENCH_DATABASE_URL (each
benchmark then creates and drops its own databases on it).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

import psycopg  # noqa: E402

from queue_workflows import testing  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
URL_ENV = "QW_BENCH_DATABASE_URL"


# -- command line --------------------------------------------------------------------------


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(URL_ENV),
        help=f"an existing Postgres server (superuser DSN; databases are created and dropped on it). "
        f"Default: ${URL_ENV}, else a private pgserver in a temp dir",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 30 s) with small counts")
    parser.add_argument("--keep-logs", action="store_true", help="keep the child processes' log dir and print its path")
    return parser


def banner(title: str, args: argparse.Namespace, server_url: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    where = "private pgserver" if not args.database_url else "--database-url server"
    print(f"== {title} ==")
    print(
        f"   {time.strftime('%Y-%m-%d %H:%M:%S')}  {os.cpu_count()} cores  Python {platform.python_version()}  "
        f"Postgres {version} ({where}){'  [--quick]' if args.quick else ''}"
    )


# -- Postgres ------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres_server(database_url: str | None, *, commit_timestamps: bool = False) -> Iterator[str]:
    """Yield a superuser DSN: the given one, or a private pgserver that is stopped and deleted after.

    `commit_timestamps` turns on `track_commit_timestamp` in a private server (a given server
    keeps its own setting), so a benchmark can time from a transaction's commit.
    SIGTERM is turned into SystemExit meanwhile, so a killed benchmark still stops its children
    and its server on the way out.
    """
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        if database_url:
            yield database_url
        else:
            with _private_pgserver(commit_timestamps) as url:
                yield url
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _private_pgserver(commit_timestamps: bool = False) -> Iterator[str]:
    import logging

    import pgserver

    logging.getLogger("pgserver").setLevel(logging.WARNING)
    data_dir = Path(tempfile.mkdtemp(prefix="qwbench-pg-"))
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    if commit_timestamps:  # a server setting: restart to apply it
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET track_commit_timestamp = on")
        server._cleanup()
        server = pgserver.get_server(data_dir, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        with contextlib.suppress(Exception):
            server._cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)


def drop_database(server_url: str, url: str) -> None:
    """Best effort: a benchmark's cleanup must not mask the result it printed."""
    with contextlib.suppress(psycopg.Error):
        testing.drop_database(server_url, url)


def qw_database(server_url: str) -> str:
    """A new database with the queue_workflows schema applied; the engine is configured to use it."""
    import queue_workflows
    from queue_workflows import db

    url = testing.create_database(server_url, "qwbench_qw")
    db.bootstrap(url=url)
    # The driver enqueues the bench apps' nodes; their workers allow them through QW_APP.
    queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch"}), node_packages=frozenset({"bench_app", "bench_gpu"}))
    import bench_app  # noqa: F401 - registers the bench tasks so enqueue validates them

    return url


def scalar(url: str, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


# -- processes -----------------------------------------------------------------------------


def child_env(database_url: str | None = None, **extra: str) -> dict[str, str]:
    """The parent's env without QW_* settings, plus the benchmarks dir on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_")}
    # Absolute: the children start in benchmarks/, where a relative entry would silently miss
    # the tree it named and the installed one would run instead.
    inherited = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH_DIR), *inherited])
    env["PYTHONUNBUFFERED"] = "1"
    env["QW_ORCHESTRATOR_METRICS_PORT"] = "0"  # a run starts several orchestrators on this one host
    if database_url:
        env["QW_DATABASE_URL"] = database_url
    env.update(extra)
    return env


def qw_env(database_url: str, **extra: str) -> dict[str, str]:
    base = dict(QW_APP="bench_app", QW_INGEST_QUEUES="fetch", QW_LOG_LEVEL="WARNING")
    base.update(extra)
    return child_env(database_url, **base)


class Procs:
    """Starts child processes with their output in a log dir, and always cleans them up."""

    def __init__(self, keep_logs: bool = False) -> None:
        self.log_dir = Path(tempfile.mkdtemp(prefix="qwbench-logs-"))
        self.keep_logs = keep_logs
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{len(self.started):03d}-{name}.log", "wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=BENCH_DIR)
        log.close()
        proc.log_path = Path(log.name)  # type: ignore[attr-defined]
        self.started.append(proc)
        return proc

    def qw_worker(self, env: dict[str, str], queue: str = "fetch") -> subprocess.Popen[bytes]:
        return self.spawn(f"qw-worker-{queue}", [sys.executable, "-m", "qw_services.worker", f"--queue={queue}"], env)

    def qw_orchestrator(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        return self.spawn("qw-orchestrator", [sys.executable, "-m", "qw_services.orchestrator"], env)

    def stop(self, procs: Sequence[subprocess.Popen[bytes]], timeout: float = 8.0) -> None:
        """SIGTERM, wait (in parallel) up to `timeout`, then SIGKILL what is left."""
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def check_alive(self, procs: Sequence[subprocess.Popen[bytes]]) -> None:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"process exited early (rc={dead[0].returncode}):\n{self.tail(dead[0])}")

    def tail(self, proc: subprocess.Popen[bytes], chars: int = 1500) -> str:
        path: Path | None = getattr(proc, "log_path", None)
        return path.read_text(errors="replace")[-chars:] if path and path.exists() else ""

    def close(self) -> None:
        self.stop(self.started, timeout=5.0)
        if self.keep_logs:
            print(f"   (child logs kept in {self.log_dir})")
        else:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- numbers -------------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of a non-empty sequence."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return "n/a"
    return f"{a / b:.2f}x"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("   " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("   " + "  ".join("-" * w for w in widths))

