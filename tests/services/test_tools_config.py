"""The tools honour the application's own configuration, and fail in one clear line.

Each test writes an application package to tmp_path whose `configure()` reads the DSN from
MY_DB_URL (QW_DATABASE_URL is never set) and serves the ingest queue `hydro`, then runs the
real console scripts from that folder with QW_APP naming it, as a new user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
from procs import query, wait_until
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import queue_workflows
from queue_workflows import db, node_queue

BIN = Path(sys.executable).parent
APP = "qwtool_app.tasks"

APP_SOURCE = """
import os
import queue_workflows

queue_workflows.configure(db_url_env="MY_DB_URL", ingest_queues=frozenset({"hydro"}))

def simulate(reason, args):
    return {"pid": os.getpid(), "n": args.get("n")}

if not os.environ.get("QWTOOL_REGISTER_NOTHING"):
    queue_workflows.register_ingest_task("simulate", simulate)
"""


def _script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"console script {name} is not installed next to {sys.executable}"
    return str(path)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    package = tmp_path / "qwtool_app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(textwrap.dedent(APP_SOURCE))
    return tmp_path


def _env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_") and k != "PYTHONPATH"}
    env.update({"MY_DB_URL": db_url, "QW_APP": APP, "QW_ORCHESTRATOR_METRICS_PORT": "0", **extra})
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _start(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    log = cwd / f"{Path(argv[-1]).name}-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"pid {proc.pid} ignored signal {sig} for {timeout}s") from None


def _enqueue_hydro(url: str, n: int) -> int:
    """Enqueue through the engine, configured here as the app configures itself."""
    queue_workflows.configure(database_url=url, ingest_queues=frozenset({"hydro"}))
    queue_workflows.register_ingest_task("simulate", lambda reason, args: {})
    return int(node_queue.enqueue_ingest_job("simulate", "hydro", {"n": n})["id"])


def test_qw_status_shows_the_apps_queues_from_its_own_db_variable(app_dir, database_url):
    _enqueue_hydro(database_url, 1)
    as_json = _run([_script("qw"), "status", "--json"], app_dir, _env(database_url))
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert set(data["ingest"]) == {"hydro"} and data["ingest"]["hydro"]["queued"] == 1, data
    table = _run([_script("qw"), "status"], app_dir, _env(database_url))
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows[0] == ["family", "queue", "scheduled", "queued", "running", "completed", "failed", "workers", "oldest"], table.stdout
    assert ["ingest", "hydro", "0", "1", "0", "0", "0", "0"] == [r for r in rows if r[:2] == ["ingest", "hydro"]][0][:8], table.stdout
    # --app works as a global option and after the subcommand, without QW_APP.
    for argv in (["--app", APP, "status", "--json"], ["status", "--json", "--app", APP]):
        done = _run([_script("qw"), *argv], app_dir, _env(database_url, QW_APP=""))
        assert done.returncode == 0 and set(json.loads(done.stdout)["ingest"]) == {"hydro"}, done.stderr


def test_worker_from_the_apps_folder_runs_a_hydro_job_and_names_its_queue(app_dir, database_url):
    job_id = _enqueue_hydro(database_url, 7)
    worker, log = _start([_script("queue-claim-worker"), "--queue", "hydro"], app_dir, _env(database_url))
    try:
        row = wait_until(
            lambda: next(iter(query(database_url, "SELECT status, result FROM ingest_jobs WHERE id = %s AND status = 'completed'", (job_id,))), None),
            timeout=30,
            what="the hydro job to complete",
        )
        assert row["result"] == {"pid": worker.pid, "n": 7}, row
        beats = wait_until(  # the beat writes its first row moments after the worker starts claiming
            lambda: query(database_url, "SELECT queue, worker_id FROM worker_heartbeats WHERE pid = %s", (worker.pid,)),
            timeout=10, what="the worker's heartbeat row",
        )
        assert [b["queue"] for b in beats] == ["hydro"] and ":hydro:" in beats[0]["worker_id"], beats
    finally:
        rc = _stop(worker)
    text = log.read_text()
    assert rc == 0, text
    assert f"worker-hydro[{worker.pid}]" in text and "ready on queue 'hydro'" in text, text
    assert "Traceback" not in text and "not registered" not in text, text


def test_orchestrator_module_migrates_a_fresh_database_named_by_the_app(app_dir, scratch_database_url):
    orchestrator, log = _start([sys.executable, "-m", "queue_workflows.leader.orchestrator"], app_dir, _env(scratch_database_url))
    try:
        wanted = db.latest_version()

        def migrated() -> bool:
            assert orchestrator.poll() is None, log.read_text()
            with db.connect(autocommit=True, url=scratch_database_url) as conn:
                return db.schema_version(conn) >= wanted

        wait_until(migrated, timeout=30, what="the orchestrator to apply migrations")
        wait_until(lambda: "orchestrator running" in log.read_text(), timeout=10, what="the sweep to start")
    finally:
        rc = _stop(orchestrator)
    assert rc == 0 and "Traceback" not in log.read_text(), log.read_text()


def test_worker_warns_at_start_about_jobs_it_cannot_run(app_dir, database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO ingest_jobs (task_name, queue, args) VALUES ('ghost_task', 'hydro', '{}')")
    env = _env(database_url, QWTOOL_REGISTER_NOTHING="1")
    worker, log = _start([_script("queue-claim-worker"), "--queue", "hydro", "--max-jobs", "1"], app_dir, env)
    try:
        wait_until(lambda: "not registered here" in log.read_text() or worker.poll() is not None, timeout=30, what="the warning")
    finally:
        _stop(worker)
    text = log.read_text()
    assert f"no ingest task is registered (QW_APP={APP})" in text, text
    assert "queued jobs on 'hydro' name task(s) not registered here: ghost_task" in text, text


def _missing_database_url(pg_server_url: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(pg_server_url), "dbname": "qw_no_such_database"})


@pytest.mark.parametrize("case", ["malformed", "bad option", "missing", "unmigrated"])
def test_a_bad_database_is_one_line_and_exit_2(case, app_dir, pg_server_url, scratch_database_url):
    url = {"malformed": "postgres//me:s3cret@db/app", "bad option": scratch_database_url + " sslmode=bogus password=s3cret",
           "missing": _missing_database_url(pg_server_url), "unmigrated": scratch_database_url}[case]
    expected = {"malformed": "not a valid Postgres DSN", "bad option": 'invalid sslmode value: "bogus"',
                "missing": "'qw_no_such_database' does not exist", "unmigrated": "run `qw migrate`"}[case]
    tools = [[_script("qw"), "status"]]
    if case != "unmigrated":  # on an unmigrated database the orchestrator migrates and a worker waits (next test)
        tools += [[sys.executable, "-m", "queue_workflows.leader.orchestrator"], [_script("queue-claim-worker"), "--queue", "hydro"]]
    for argv in tools:
        started = time.monotonic()
        done = _run(argv, app_dir, _env(url), timeout=30)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (argv, done.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (argv, done.stderr)
        assert "MY_DB_URL" in lines[0] or case == "unmigrated", lines
        assert "s3cret" not in done.stderr and time.monotonic() - started < 15, done.stderr


def test_a_worker_waiting_for_the_schema_stops_at_once_on_sigint(app_dir, scratch_database_url):
    worker, log = _start([_script("queue-claim-worker"), "--queue", "hydro"], app_dir, _env(scratch_database_url))
    try:
        wait_until(lambda: "waiting for" in log.read_text() or worker.poll() is not None, timeout=30, what="the schema wait")
        assert worker.poll() is None, log.read_text()
        time.sleep(0.7)  # into the wait's sleep, past its first look
        sent = time.monotonic()
        rc = _stop(worker, signal.SIGINT, timeout=10)
        took = time.monotonic() - sent
    finally:
        if worker.poll() is None:
            worker.kill()
    assert rc == 0 and took < 3, (rc, took, log.read_text())
    assert "Traceback" not in log.read_text() and "run `qw migrate`" in log.read_text()


def test_an_unknown_queue_is_exit_2(app_dir, database_url):
    done = _run([_script("queue-claim-worker"), "--queue", "nosuch"], app_dir, _env(database_url))
    assert done.returncode == 2 and "error: unknown ingest queue 'nosuch'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_claim_worker_main_in_a_host_process_logs_to_stderr(app_dir, database_url):
    job_id = _enqueue_hydro(database_url, 1)
    script = "import qwtool_app.tasks\nfrom queue_workflows import claim_worker\nraise SystemExit(claim_worker.main(['--queue', 'hydro', '--max-jobs', '1']))\n"
    done = _run([sys.executable, "-c", script], app_dir, _env(database_url, QW_APP=""))
    assert done.returncode == 0, done.stderr
    assert "ready on queue 'hydro'" in done.stderr and f"job {job_id} completed" in done.stderr, done.stderr


def test_queue_worker_control_uses_the_apps_database_and_queues(app_dir, database_url):
    done = _run([_script("queue-worker-control"), "--queue", "hydro", "--off", "--host", "box"], app_dir, _env(database_url))
    assert done.returncode == 0 and "box/hydro: OFF (hard)" in done.stdout, done.stderr
    again = _run([_script("queue-worker-control"), "--app", APP, "--queue", "hydro", "--on", "--host", "box"], app_dir, _env(database_url, QW_APP=""))
    assert again.returncode == 0 and "box/hydro: ON" in again.stdout, again.stderr
    rows = query(database_url, "SELECT desired_state FROM worker_controls WHERE host_label = 'box' AND queue = 'hydro'")
    assert rows == [{"desired_state": "on"}]


def test_qw_dev_serves_the_app_on_its_own_database_and_exits_when_done(app_dir, database_url, tmp_path):
    for n in range(2):
        _enqueue_hydro(database_url, n)
    done = _run([_script("qw"), "dev", "--exit-when-done", "--timeout", "60"], app_dir,
                _env(database_url, QW_DATA_DIR=str(tmp_path / "never")), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing left to run" in done.stdout and "embedded" not in done.stdout, done.stdout
    assert not (tmp_path / "never").exists(), "no embedded Postgres when the app names its database"
    rows = query(database_url, "SELECT status, count(*) AS n FROM ingest_jobs WHERE queue = 'hydro' GROUP BY status")
    assert rows == [{"status": "completed", "n": 2}], rows
