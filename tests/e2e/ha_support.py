"""The HA failover test's stack (deploy/compose.ha.yaml under a project of its own) and its steady load of enqueues and DAG runs."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from e2e_support import ROOT, rows_or_none

import queue_workflows
from queue_workflows import node_queue

HA_IMAGES = {"qw-ha/etcd:3.4": "etcd", "qw-ha/patroni:3.0": "patroni"}
NODES = ("pg1", "pg2")
PATRONICTL = ("patronictl", "-c", "/etc/qw-ha/patroni.yml")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class HaStack:
    def __init__(self, secrets: Path, probe_dir: Path, schedule_scale: int) -> None:
        self.project = f"{os.environ.get('QW_E2E_PROJECT_PREFIX', 'qwe2e')}ha{uuid.uuid4().hex[:6]}"
        self.ports = {"pg1": free_port(), "pg2": free_port()}
        self.schedule_scale = schedule_scale
        self.schedule_origin = time.time()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
        self.env.update(
            COMPOSE_PROJECT_NAME=self.project,
            COMPOSE_PROFILES="ha,cpu",
            COMPOSE_FILE="compose.yaml:deploy/compose.ha.yaml:tests/e2e/compose.ha-probe.yaml",
            QW_SECRETS_DIR=str(secrets),
            QW_DB_PUBLISH=f"127.0.0.1:{self.ports['pg1']}",
            QW_HA_PG2_PUBLISH=f"127.0.0.1:{self.ports['pg2']}",
            QW_HA_PROBE_DIR=str(probe_dir),
            QW_HA_SCHEDULE_SCALE=str(schedule_scale),
            QW_HA_SCHEDULE_ORIGIN=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.schedule_origin)),
            QW_IMAGE_TAG=os.environ.get("QW_IMAGE_TAG", "latest"),
            QW_HOST_LABEL="e2e-ha",
            QW_SHUTDOWN_GRACE_SECONDS="5",
            QW_STOP_GRACE_PERIOD="15s",
        )
        self.schedule_origin = float(int(self.schedule_origin))  # the origin as the scheduler reads it, to the second
        self.secrets = secrets
        self.log = probe_dir / "executions.jsonl"

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["docker", "compose", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def container(self, node: str) -> str:
        return f"{self.project}-{node}-1"

    def node_url(self, node: str, role: str = "worker") -> str:
        password = (self.secrets / f"{role}_db_password").read_text().strip()
        return f"postgresql://qw_{role}:{password}@127.0.0.1:{self.ports[node]}/qw?connect_timeout=3"

    def url(self, role: str = "worker") -> str:
        """The services' DSN from this machine: both nodes, and only the one that takes writes."""
        password = (self.secrets / f"{role}_db_password").read_text().strip()
        return (f"postgresql://qw_{role}:{password}@127.0.0.1:{self.ports['pg1']},127.0.0.1:{self.ports['pg2']}/qw"
                "?target_session_attrs=read-write&connect_timeout=3")

    def patronictl(self, *args: str, on: str | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
        for node in (on,) if on else NODES:
            done = self.compose("exec", "-T", node, *PATRONICTL, *args, check=check, timeout=60)
            if done.returncode == 0:
                return done
        return done

    def members(self) -> dict[str, dict[str, Any]]:
        """Each member as `patronictl list` (what an operator runs) shows it: Role, State, TL, Lag in MB."""
        listed = self.patronictl("list", "-f", "json")
        return {m["Member"]: m for m in json.loads(listed.stdout)} if listed.returncode == 0 else {}

    def healthy_pair(self) -> dict[str, dict[str, Any]] | None:
        """Both nodes up: a Leader and a streaming Sync Standby."""
        found = self.members()
        roles = sorted(m.get("Role", "") for m in found.values())
        standby = [m for m in found.values() if m.get("Role") == "Sync Standby"]
        ok = roles == ["Leader", "Sync Standby"] and standby and standby[0].get("State") in ("streaming", "running")
        return found if ok else None

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
    """A producer: a probe job every `every` seconds and a DAG run every `dag_every`-th time, each acknowledgement recorded."""

    def __init__(self, every: float, job_seconds: float, dag: Any, dag_every: int = 6) -> None:
        self.every, self.job_seconds, self.dag, self.dag_every = every, job_seconds, dag, dag_every
        self.acked: dict[str, tuple[int, float]] = {}  # probe key -> (job id, acknowledged at)
        self.runs: dict[str, tuple[int, float]] = {}  # DAG tag -> (run id, acknowledged at)
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                if n % self.dag_every == 0:
                    tag = f"dag{n}"
                    self.runs[tag] = (queue_workflows.start_run(self.dag, {"tag": tag}), time.time())
                else:
                    job = node_queue.enqueue_ingest_job("ha.probe", "fetch", {"n": n, "seconds": self.job_seconds}, reason="ha-e2e")
                    self.acked[str(n)] = (int(job["id"]), time.time())
            except (psycopg.Error, queue_workflows.QueueWorkflowsError) as exc:  # not acknowledged: the client retries, as an application would
                self.failures.append(type(exc).__name__)
            self.stop.wait(self.every)

    def ack_times(self) -> list[float]:
        return sorted(t for _, t in [*list(self.acked.values()), *list(self.runs.values())])
