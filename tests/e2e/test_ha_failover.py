"""The `ha` profile (deploy/compose.ha.yaml, docs/ha.md) survives the loss of its primary's box.

etcd, two Postgres nodes under Patroni (one a synchronous standby), the migrations, an
orchestrator and two ingest workers come up under a project of their own. A steady load of
enqueues runs, each acknowledgement recorded; the primary's container is killed (SIGKILL, as a
dead box); Patroni promotes the standby and every service finds it through the multi-host DSN.
Then: every acknowledged job exists and completed, no two executions of one job overlapped, and
the leader leads again. The failover time and the commit latency with and without the
synchronous standby are printed (docs/ha.md quotes them).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from e2e_support import ROOT, engine_problem, rows, rows_or_none

import queue_workflows
from queue_workflows import node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PROBE_APP = Path(__file__).resolve().parent / "ha_probe"
SECRET_FILES = ("postgres_password", "orchestrator_db_password", "scheduler_db_password", "dashboard_db_password",
                "worker_db_password", "metrics_db_password", "dashboard_password", "replication_password")
SECRETS_GID = 10001  # the images' user's group, as in conftest.py
HA_IMAGES = {"qw-ha/etcd:3.4": "etcd", "qw-ha/patroni:3.0": "patroni"}
NODES = ("pg1", "pg2")
JOB_SECONDS = 0.6
LONG_JOB_SECONDS = 24.0  # longer than the failover, shorter than the 30 s lease


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def poll(what: str, check: Any, timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout:g}s: {what}")


class HaStack:
    def __init__(self, secrets: Path, probe_dir: Path) -> None:
        self.project = f"{os.environ.get('QW_E2E_PROJECT_PREFIX', 'qwe2e')}ha{uuid.uuid4().hex[:6]}"
        self.ports = {"pg1": free_port(), "pg2": free_port()}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
        self.env.update(
            COMPOSE_PROJECT_NAME=self.project,
            COMPOSE_PROFILES="ha,cpu",
            COMPOSE_FILE="compose.yaml:deploy/compose.ha.yaml:tests/e2e/compose.ha-probe.yaml",
            QW_SECRETS_DIR=str(secrets),
            QW_DB_PUBLISH=f"127.0.0.1:{self.ports['pg1']}",
            QW_HA_PG2_PUBLISH=f"127.0.0.1:{self.ports['pg2']}",
            QW_HA_PROBE_DIR=str(probe_dir),
            QW_IMAGE_TAG=os.environ.get("QW_IMAGE_TAG", "latest"),
            QW_HOST_LABEL="e2e-ha",
            QW_SHUTDOWN_GRACE_SECONDS="5",
            QW_STOP_GRACE_PERIOD="15s",
        )
        self.secrets = secrets
        self.log = probe_dir / "executions.jsonl"

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["docker", "compose", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def node_url(self, node: str, role: str = "worker") -> str:
        password = (self.secrets / f"{role}_db_password").read_text().strip()
        return f"postgresql://qw_{role}:{password}@127.0.0.1:{self.ports[node]}/qw?connect_timeout=3"

    def url(self, role: str = "worker") -> str:
        """The services' DSN from this machine: both nodes, and only the one that takes writes."""
        password = (self.secrets / f"{role}_db_password").read_text().strip()
        return (f"postgresql://qw_{role}:{password}@127.0.0.1:{self.ports['pg1']},127.0.0.1:{self.ports['pg2']}/qw"
                "?target_session_attrs=read-write&connect_timeout=3")

    def members(self) -> dict[str, str]:
        """Each member's role, as `patronictl list` (what an operator runs) gives it."""
        for node in NODES:
            listed = self.compose("exec", "-T", node, "patronictl", "-c", "/etc/qw-ha/patroni.yml", "list", "-f", "json",
                                  check=False, timeout=60)
            if listed.returncode == 0:
                return {m["Member"]: m["Role"] for m in json.loads(listed.stdout)}
        return {}

    def primary(self) -> str | None:
        for node in NODES:
            found = rows_or_none(self.node_url(node), "SELECT NOT pg_is_in_recovery() AS primary")
            if found and found[0]["primary"]:
                return node
        return None


def build_ha_images() -> None:
    """Built every run: the layer cache makes an unchanged recipe and base image cost ~1 s, and a
    changed Postgres stand-in (.ci/standin-images.sh) gives a fresh Patroni image on top of it."""
    started = time.monotonic()
    for image, target in HA_IMAGES.items():
        flags = os.environ.get("QW_BUILD_FLAGS", "").split()
        subprocess.run(["docker", "build", *flags, "-q", "--target", target, "-t", image, "."],
                       cwd=ROOT / "deploy" / "ha", check=True, timeout=900, capture_output=True)
    print(f"\nha images (deploy/ha/Dockerfile): {time.monotonic() - started:.1f}s")


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaStack]:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    build_ha_images()
    secrets = tmp_path_factory.mktemp("ha-secrets")
    secrets.chmod(0o755)
    for name in SECRET_FILES:
        (secrets / name).write_text(uuid.uuid4().hex + "\n")
        os.chown(secrets / name, -1, SECRETS_GID)
        (secrets / name).chmod(0o640)
    probe_dir = tmp_path_factory.mktemp("ha-probe")
    probe_dir.chmod(0o777)  # the workers' user writes the executions log there
    stack = HaStack(secrets, probe_dir)
    started = time.monotonic()
    try:
        stack.compose("up", "-d", "--wait", "--scale", "ingest-worker=2", "etcd", "pg1", "pg2", "migrate", "orchestrator",
                      "ingest-worker", timeout=600)
        print(f"\nha profile up: {time.monotonic() - started:.1f}s")
        yield stack
    finally:
        # The engine's own lines (reclaims, reconnects, discarded results), not each retry's.
        logs = stack.compose("logs", "--no-color", "orchestrator", "ingest-worker", check=False).stdout.splitlines()
        print("\n".join(line for line in logs if "session is read-only" not in line)[-8000:])
        stack.compose("down", "-v", "--remove-orphans", "--timeout", "10", check=False)


def commit_latency(url: str, n: int = 200) -> dict[str, float]:
    """Median time of a transaction that writes a commit record, per synchronous_commit mode.

    The modes alternate transaction by transaction on one connection, so both see the same noise
    of a shared machine: `local` waits for this node's flush, `on` for the standby's too.
    """
    times: dict[str, list[float]] = {"local": [], "on": []}
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(2 * n):
            mode = ("local", "on")[i % 2]
            started = time.perf_counter()
            with conn.transaction():
                conn.execute(f"SET LOCAL synchronous_commit = {mode}")  # noqa: S608 - one of two fixed literals
                conn.execute("SELECT pg_current_xact_id()")
            times[mode].append((time.perf_counter() - started) * 1000)
    return {mode: statistics.median(found) for mode, found in times.items()}


class Load:
    """Enqueues a probe job every `every` seconds, recording what was acknowledged and when."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.acked: dict[int, tuple[int, float]] = {}  # n -> (job id, acknowledged at)
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                job = node_queue.enqueue_ingest_job("ha.probe", "fetch", {"n": n, "seconds": JOB_SECONDS}, reason="ha-e2e")
                self.acked[n] = (int(job["id"]), time.time())
            except psycopg.Error as exc:  # not acknowledged: the client retries, as an application would
                self.failures.append(type(exc).__name__)
            self.stop.wait(self.every)


def executions(log: Path) -> dict[int, list[tuple[float, float]]]:
    """Each job's runs as (start, last sign of life): its end, or its last tick if its worker stopped mid-way."""
    runs: dict[str, tuple[int, float, float]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        n, start, last = runs.get(entry["run"], (entry["n"], entry["t"], entry["t"]))
        runs[entry["run"]] = (n, start if entry["phase"] != "start" else entry["t"], max(last, entry["t"]))
    found: dict[int, list[tuple[float, float]]] = {}
    for n, start, last in runs.values():
        found.setdefault(n, []).append((start, last))
    return found


def overlapping(runs: list[tuple[float, float]]) -> bool:
    ordered = sorted(runs)
    return any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:]))


def test_the_primary_dies_and_the_stack_follows_the_promoted_standby(ha):
    sys.path.insert(0, str(PROBE_APP))
    import qw_ha_probe  # noqa: F401 - registers ha.probe here too: enqueueing checks the task

    first = poll("a primary", ha.primary, 60)
    standby = next(node for node in NODES if node != first)
    members = poll("a synchronous standby", lambda: ha.members() if "Sync Standby" in ha.members().values() else None, 60, 1)
    assert members == {first: "Leader", standby: "Sync Standby"}, members
    # The cost of the synchronous standby, measured here: a commit waits for the standby's flush.
    latency = commit_latency(ha.node_url(first))
    print(f"\ncommit latency (median of 200 each, interleaved): synchronous_commit=local {latency['local']:.2f} ms, "
          f"on (synchronous standby) {latency['on']:.2f} ms")

    queue_workflows.configure(database_url=ha.url(), ingest_queues=frozenset({"fetch", "load"}))
    leader_before = poll("a leader", lambda: rows_or_none(ha.url("orchestrator"),
                         "SELECT epoch, leader_id FROM qw_leadership WHERE lease_until > now()"), 60)
    load = Load(every=JOB_SECONDS / 2)
    load.thread.start()
    # A job longer than the failover runs on one worker while the other takes the short ones:
    # were it handed out again before its worker is back, the idle worker would run it at once.
    long_job = node_queue.enqueue_ingest_job("ha.probe", "fetch", {"n": 0, "seconds": LONG_JOB_SECONDS}, reason="ha-e2e")["id"]
    poll("the long job running", lambda: rows(ha.url(), "SELECT 1 FROM ingest_jobs WHERE id = %s AND status = 'running'",
                                              (long_job,)), 60, 0.05)
    poll("short jobs acknowledged", lambda: len(load.acked) >= 6, 60, 0.05)
    subprocess.run(["docker", "kill", f"{ha.project}-{first}-1"], check=True, capture_output=True, timeout=60)
    killed_at = time.time()  # once the kill returned: nothing commits on the old primary after this
    poll(f"{standby} promoted", lambda: ha.primary() == standby, 90, 0.1)
    promoted_at = time.time()
    first_done = poll("a completion on the new primary", lambda: rows_or_none(ha.node_url(standby),
                      "SELECT extract(epoch FROM min(finished_at))::float AS t FROM ingest_jobs"
                      " WHERE status = 'completed' AND finished_at > to_timestamp(%s) HAVING count(*) > 0", (killed_at,)), 120, 0.1)
    first_completion = first_done[0]["t"]
    poll("enqueues acknowledged by the new primary", lambda: sum(t > promoted_at for _, t in list(load.acked.values())) >= 10, 60, 0.1)
    load.stop.set()
    load.thread.join(timeout=30)
    acked = {**load.acked, 0: (long_job, 0.0)}
    ids = [job for job, _ in acked.values()]

    def all_done() -> list[dict] | None:
        found = rows_or_none(ha.url(), "SELECT id, status, attempts FROM ingest_jobs WHERE id = ANY(%s)", (ids,))
        return found if found and len(found) == len(ids) and all(r["status"] == "completed" for r in found) else None

    try:
        done = poll("every acknowledged job completed", all_done, 180, 0.5)
    except AssertionError:
        found = rows(ha.url(), "SELECT status, count(*) FROM ingest_jobs WHERE id = ANY(%s) GROUP BY 1", (ids,))
        raise AssertionError(f"{len(ids)} acknowledged; on the new primary: {found}") from None
    runs = executions(ha.log)
    doubled = {n: r for n, r in runs.items() if overlapping(r)}
    reruns = sum(len(r) - 1 for r in runs.values())
    lost = [n for n in acked if n not in runs]
    first_ack = min(t for _, t in acked.values() if t > killed_at)
    print(f"failover: kill -> {standby} promoted {promoted_at - killed_at:.1f}s, kill -> first completion on it "
          f"{first_completion - killed_at:.1f}s, kill -> first enqueue acknowledged by it {first_ack - killed_at:.1f}s; "
          f"{len(acked)} acknowledged, {len(load.failures)} enqueues refused during the failover "
          f"({sorted(set(load.failures))}), {reruns} sequential re-runs, {len(doubled)} concurrent double runs")
    assert len(done) == len(ids)
    assert lost == [], f"acknowledged, completed, but the probe never ran them: {lost}"
    assert doubled == {}, f"two executions of one job overlapped: {doubled}"
    leader_after = poll("a leader on the new primary", lambda: rows_or_none(ha.url("orchestrator"),
                        "SELECT epoch, leader_id FROM qw_leadership WHERE lease_until > now()"), 60)
    assert leader_after[0]["epoch"] >= leader_before[0]["epoch"]
    status = rows(ha.node_url(standby, "orchestrator"), "SELECT count(*) AS live FROM worker_heartbeats WHERE last_seen > now() - interval '30 seconds'")
    assert status[0]["live"] >= 2, f"the workers are not beating on the new primary: {status}"
