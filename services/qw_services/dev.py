"""`qw dev`: orchestrator + one worker per queue for the app (the demo by default), on one machine.

Uses QW_DATABASE_URL, or starts an embedded Postgres under QW_DATA_DIR when unset and prints
its DSN so `qw status` can watch from another terminal. For the demo it enqueues work and
shows it completing; either way it keeps serving until Ctrl-C, with one live summary line
(`-v`: the processes' log instead, a line per job).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import queue_workflows
from queue_workflows import ConfigError, app_loader, db, node_queue, scheduler
from queue_workflows.common import sqlfile
from queue_workflows.ops.status import status_data
from queue_workflows.settings import load_settings
from queue_workflows.worker.exits import EXIT_BUDGET, EXIT_DEVICE_ERROR, EXIT_HARD_STOP, EXIT_JOB_TAKEN, EXIT_OK, EXIT_STALLED

from .live_line import LiveLine
from .runtime import on_stop_signals, setup_logging
from .tables import print_table, status_table

_DEV = sqlfile.load("qw_services", "dev.sql")

log = logging.getLogger("queue_workflows.dev")

DEMO_APP = "qw_demo"

# Exits a worker makes by design (--max-jobs, a stop, an operator's hard OFF): started again without alarm.
NORMAL_EXITS = {EXIT_OK: "finished", EXIT_HARD_STOP: "hard OFF by an operator; it starts parked"}
TRIP_EXITS = {EXIT_BUDGET: "job over its budget", EXIT_STALLED: "job stalled", EXIT_JOB_TAKEN: "its job was taken away",
              EXIT_DEVICE_ERROR: "GPU device error"}


@dataclass
class Child:
    role: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = field(default=0)


class Supervisor:
    """Starts children, restarts one that dies, and stops them all on request."""

    def __init__(self, env: dict[str, str], grace: float) -> None:
        self.env = env
        self.grace = grace
        self.children: list[Child] = []

    def add(self, role: str, module: str, *args: str) -> None:
        child = Child(role, [sys.executable, "-m", module, *args])
        self.children.append(child)
        self._start(child)

    def _start(self, child: Child) -> None:
        child.proc = subprocess.Popen(child.argv, env=self.env, preexec_fn=functools.partial(_die_with_parent, os.getpid()))
        log.info("started %s (pid %d)", child.role, child.proc.pid)

    def check(self) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None:
                code = child.proc.returncode
                if code in NORMAL_EXITS:
                    log.info("%s exited %d (%s); starting a fresh one", child.role, code, NORMAL_EXITS[code])
                else:
                    child.restarts += 1
                    why = f" ({TRIP_EXITS[code]})" if code in TRIP_EXITS else ""
                    log.warning("%s exited with %s%s; restarting (restart #%d)", child.role, code, why, child.restarts)
                self._start(child)

    def stop_all(self) -> None:
        live = [c.proc for c in self.children if c.proc is not None and c.proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("pid %d did not stop in %.0fs; killing it", proc.pid, self.grace)
                proc.kill()
                proc.wait()


def _die_with_parent(parent_pid: int) -> None:
    """In the child, before exec: get SIGTERM when `qw dev` dies, however it dies (Linux).

    A parent that died between the fork and the prctl sends no signal, so the child checks
    that its parent is still the one that forked it, and gives up if not.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


class ScheduleWatch:
    """Prints a line whenever the app's scheduler enqueues a slot, so the schedule is seen working."""

    def __init__(self, say: Callable[[str], None] = print) -> None:
        self.seen: dict[str, int] = {}
        self.say = say

    def poll(self) -> None:
        for row in scheduler.schedule_status():
            job = row["last_job_id"]
            if job is not None and self.seen.get(row["name"]) != job:
                self.seen[row["name"]] = job
                self.say(f"qw dev: schedule {row['name']!r} enqueued ingest job {job} on {row['queue']!r} "
                         f"({row['last_kind']} {row['last_slot']}); next {row['next_fire']}")


def _database_url(data_dir: Any, app_config: Any) -> tuple[str, Any]:
    """The app's own database when it names one (its db_url_env, else QW_DATABASE_URL); else an embedded one."""
    try:
        return app_config.database_url(), None
    except ConfigError:
        pass
    from .embedded import start_embedded_postgres

    return start_embedded_postgres(data_dir)


def _demo_totals(job_ids: dict[str, list[int]]) -> dict[str, int]:
    totals = {"queued": 0, "running": 0, "completed": 0, "failed": 0}
    with db.transaction() as conn:
        for table, ids in job_ids.items():
            view = f"{table}_all" if table in (node_queue.INGEST_TABLE, node_queue.NODE_TABLE) else table  # runs never move
            rows = conn.execute(_DEV.sql("job_status_counts", view), {"ids": ids}).fetchall()
            for row in rows:
                totals[row["status"]] = totals.get(row["status"], 0) + row["n"]
    return totals


def _announce_database(url: str, embedded: bool, app: str) -> None:
    if embedded:
        print(f"qw dev: embedded Postgres at {url}", flush=True)
        print(f"qw dev: from another terminal: QW_DATABASE_URL='{url}' QW_APP={app} qw status", flush=True)
    else:
        print("qw dev: using the application's configured database", flush=True)


def run(*, jobs: int, exit_when_done: bool, timeout: float, app: str | None = None, verbose: bool = False) -> int:
    """Serve `app` (default: the demo, whose jobs it enqueues and watches) until Ctrl-C."""
    os.environ["QW_LOG_LEVEL"] = _log_level(os.environ.get("QW_LOG_LEVEL"), verbose)  # the children inherit it
    setup_logging("qw-dev")
    settings = load_settings()
    app = app or settings.app or DEMO_APP
    os.environ["QW_APP"] = app
    queue_workflows.config.reset()
    # An app's configure() may name its own database variable; an embedded one is started below otherwise.
    config = app_loader.load_app(app, need_database=False).config
    url, server = _database_url(settings.data_dir, config)
    # Children import the app again and read its variable: point it (and QW_DATABASE_URL) at `url`.
    os.environ.update({config.db_url_env: url, "QW_DATABASE_URL": url})
    env = dict(os.environ)
    env.setdefault("QW_GPU_CPU_FALLBACK", "1")  # the dev stack runs gpu jobs on a laptop too
    _announce_database(url, embedded=server is not None, app=app)

    supervisor = Supervisor(env, grace=config.settings.shutdown_grace_seconds + 5)
    stopping = on_stop_signals(lambda: None)
    signal.signal(signal.SIGHUP, lambda *_: stopping.set())  # a closed terminal stops everything too
    supervisor.add("orchestrator", "qw_services.orchestrator")
    queues = ["cpu", "gpu", *sorted(config.settings.ingest_queues)]  # gpu: on the CPU unless QW_GPU_CPU_FALLBACK=0
    for queue in queues:
        supervisor.add(f"worker-{queue}", "qw_services.worker", f"--queue={queue}")
    live = LiveLine()
    watch = ScheduleWatch(live.say) if scheduler.ingest_schedule() else None
    if watch is not None:
        supervisor.add("scheduler", "qw_services.scheduler")
    try:
        db.wait_for_schema(timeout=60, stop=stopping)
        if app != DEMO_APP:
            return _serve_app(supervisor, stopping, app, queues, watch, live, exit_when_done=exit_when_done, timeout=timeout)
        return _run_demo(supervisor, stopping, queues, watch, live, jobs=jobs, exit_when_done=exit_when_done, timeout=timeout)
    finally:
        live.end()
        print(f"qw dev: stopping workers{', scheduler' if watch is not None else ''} and orchestrator", flush=True)
        supervisor.stop_all()
        db.close_pools()
        if server is not None:
            print("qw dev: stopping embedded Postgres", flush=True)
            server._cleanup()  # noqa: SLF001 - pgserver has no public stop; stop now, not at interpreter exit


def _log_level(given: str | None, verbose: bool) -> str:
    """-v: the log, a line per job (DEBUG stays DEBUG); else QW_LOG_LEVEL, default warnings only, as the live line shows the rest."""
    if verbose:
        return "DEBUG" if (given or "").upper() == "DEBUG" else "INFO"
    return given or "WARNING"


def _serve_app(
    supervisor: Supervisor, stopping: threading.Event, app: str, queues: list[str], watch: ScheduleWatch | None,
    live: LiveLine, *, exit_when_done: bool, timeout: float,
) -> int:
    """Serve the app's own queues; with --exit-when-done, stop once nothing is left to run."""
    print(f"qw dev: serving {app} on {', '.join(queues)}; Ctrl-C stops everything", flush=True)
    started = time.monotonic()
    while not stopping.is_set():
        supervisor.check()
        if watch is not None:
            watch.poll()
        data = status_data()
        live.show(_app_summary(data))
        if exit_when_done:
            pending = sum(c["queued"] + c["running"] + c["scheduled"] for family in ("node", "ingest") for c in data[family].values())
            if pending == 0:
                live.say("qw dev: nothing left to run")
                return 0
            if time.monotonic() - started > timeout:
                live.say(f"qw dev: {pending} job(s) still pending after {timeout:.0f}s")
                return 1
        stopping.wait(1.0)
    return 0


def _app_summary(data: dict[str, Any]) -> str:
    counts = [c for family in ("node", "ingest") for c in data[family].values()]
    total = {key: sum(c[key] for c in counts) for key in ("scheduled", "queued", "running", "completed", "failed")}
    return "qw dev: " + ", ".join(f"{key} {n}" for key, n in total.items()) + f"; {len(data['workers'])} workers"


def _run_demo(
    supervisor: Supervisor, stopping: threading.Event, queues: list[str], watch: ScheduleWatch | None,
    live: LiveLine, *, jobs: int, exit_when_done: bool, timeout: float,
) -> int:
    """Enqueue the demo's jobs, show them completing, then keep serving (or stop when asked to)."""
    import qw_demo

    if stopping.is_set():
        return 0
    started = time.monotonic()
    job_ids = qw_demo.enqueue_demo(jobs, queues=[q for q in queues if q not in ("cpu", "gpu")])
    total = sum(len(ids) for ids in job_ids.values())
    runs = len(job_ids.get("workflow_runs", []))
    print(f"qw dev: enqueued {total - runs} demo jobs on {', '.join(queues)} and started {runs} workflow runs "
          f"(`qw runs`); Ctrl-C stops everything", flush=True)
    approval = qw_demo.start_approval()
    print(f"qw dev: run {approval} waits for you: qw input {approval} approve --value '{{\"approved\": true}}'", flush=True)
    finished = False
    while not stopping.is_set():
        supervisor.check()
        if watch is not None:
            watch.poll()
        totals = _demo_totals(job_ids)
        done = totals["completed"] + totals["failed"]
        if not finished:
            live.show(f"qw dev: {done}/{total} done  (queued {totals['queued']}, running {totals['running']}, "
                      f"completed {totals['completed']}, failed {totals['failed']})")
        if done == total and not finished:
            finished = True
            live.say(f"qw dev: demo finished in {time.monotonic() - started:.1f}s:")
            data = status_data()  # counts per family, plus ages and workers the table does not show
            print_table(status_table({"node": data["node"], "ingest": data["ingest"]}))
            if exit_when_done:
                break
        if not finished and time.monotonic() - started > timeout:
            live.say(f"qw dev: demo did not finish within {timeout:.0f}s")
            return 1
        stopping.wait(1.0)
    return 0 if finished or stopping.is_set() else 1
