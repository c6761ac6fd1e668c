"""The hw-metrics sidecar as a real process: NOTIFY received, host_metrics row written, /metrics scraped, outages ridden out."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import psycopg
import pytest
from procs import PrivatePostgres, Procs, log_text, query, query_or_none, service_env, wait_exit, wait_until
from prometheus_client.parser import text_string_to_metric_families

from queue_workflows import node_queue, tasks
from queue_workflows.telemetry import nvidia

pytestmark = pytest.mark.multiprocess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_nvidia_smi(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, Fake GPU, GPU-fake, 17, 2048, 8192, 55, 70.5'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def _sidecar(procs: Procs, url: str, tmp_path: Path, port: int, host: str):
    env = service_env(url, PATH=_fake_nvidia_smi(tmp_path), DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock", QW_METRICS_QUEUE_SECONDS="0.3")
    return procs.hw_metrics(env, "--interval", "0.3", "--port", str(port), "--addr", "127.0.0.1",
                            "--host-label", host, "--cgroup-root", str(tmp_path / "no-cgroup-mount"))


def test_the_sidecar_notifies_upserts_and_serves_prometheus(database_url, procs, tmp_path):
    port = _free_port()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN hw_metrics")
        proc = _sidecar(procs, database_url, tmp_path, port, "sidecar-1")
        notes = [n.payload for n in listener.notifies(timeout=30, stop_after=1)]
    assert notes, f"no hw_metrics notification within 30 s:\n{procs.logs()}"
    payload = json.loads(notes[0])
    assert payload["v"] == 1 and payload["host"] == "sidecar-1"
    assert payload["memory"]["total_bytes"] > 0 and payload["cpu"]["count"] >= 1
    assert payload["stack"] is None  # no cgroup mount, no Docker socket: host figures only
    if nvidia.nvml_samples() is None:  # where real NVML answers, it wins over the fake tool
        assert [(g["source"], g["uuid"], g["memory_total_bytes"]) for g in payload["gpus"]] == [("nvidia-smi", "GPU-fake", 8192 << 20)]

    rows = query(database_url, "SELECT payload_version, payload FROM host_metrics WHERE host_label = 'sidecar-1'")
    assert len(rows) == 1 and rows[0]["payload_version"] == 1 and rows[0]["payload"]["host"] == "sidecar-1"

    tasks.register_ingest_task("noop", lambda reason: {})
    for _ in range(2):
        node_queue.enqueue_ingest_job("noop", "fetch")
    queued = (("family", "ingest"), ("queue", "fetch"), ("status", "queued"))
    metrics = wait_until(lambda: (m := _scrape(port)).get(("qw_queue_jobs", queued)) == 2 and m,
                         timeout=20, what="qw_queue_jobs to show the two queued jobs")
    assert metrics[("qw_hw_metrics_database_up", (("host", "sidecar-1"),))] == 1
    assert metrics[("qw_host_memory_total_bytes", (("host", "sidecar-1"),))] == payload["memory"]["total_bytes"]
    assert metrics[("qw_queue_oldest_queued_seconds", (("family", "ingest"), ("queue", "fetch")))] >= 0
    assert ("qw_queue_jobs", (("family", "node"), ("queue", "gpu"), ("status", "queued"))) in metrics  # known queues show 0

    health = [sys.executable, "-m", "qw_services.hw_metrics", "--health", "--port", str(port), "--interval", "0.3"]
    assert subprocess.run(health, env=service_env(database_url), capture_output=True, timeout=30).returncode == 0

    proc.send_signal(signal.SIGTERM)
    assert wait_exit(proc, 15, procs) == 0, log_text(proc)
    done = subprocess.run(health, env=service_env(database_url), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "unhealthy" in done.stderr


def test_the_sidecar_rides_out_a_postgres_restart(private_pg: PrivatePostgres, private_database_url: str, procs, tmp_path):
    url, port = private_database_url, _free_port()
    proc = _sidecar(procs, url, tmp_path, port, "outage-1")
    sampled = "SELECT extract(epoch FROM sampled_at)::float AS ts FROM host_metrics WHERE host_label = 'outage-1'"
    wait_until(lambda: query_or_none(url, sampled), timeout=30, what="the first host_metrics row")

    private_pg.stop()
    up = ("qw_hw_metrics_database_up", (("host", "outage-1"),))
    stamp = ("qw_hw_metrics_last_sample_timestamp_seconds", (("host", "outage-1"),))
    down = wait_until(lambda: (m := _scrape(port)).get(up) == 0 and m, timeout=20, what="the sidecar to see the outage")
    wait_until(lambda: _scrape(port)[stamp] > down[stamp], timeout=10, what="samples to keep coming during the outage")
    assert proc.poll() is None

    private_pg.start()
    restarted_at = _scrape(port)[stamp]
    wait_until(lambda: (rows := query_or_none(url, sampled)) and rows[0]["ts"] > restarted_at, timeout=30,
               what="a fresh host_metrics row after the restart")
    wait_until(lambda: _scrape(port).get(up) == 1, timeout=10, what="database_up back to 1")
    assert log_text(proc).count("still sampling") == 1  # one warning per outage, not one per sample
    proc.send_signal(signal.SIGTERM)
    assert wait_exit(proc, 15, procs) == 0, log_text(proc)


class FakeDockerEngine:
    """A Docker Engine API on a unix socket, answering the sidecar's reads and recording every request."""

    def __init__(self, socket_path: str, containers: list[dict]) -> None:
        import socketserver
        import threading
        from http.server import BaseHTTPRequestHandler
        from urllib.parse import parse_qs, urlparse

        self.requests: list[tuple[str, str]] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                engine.requests.append(("GET", self.path))
                url = urlparse(self.path)
                if url.path.endswith("/version"):
                    return self._reply(200, {"ApiVersion": "1.44", "Version": "26.0.0", "MinAPIVersion": "1.24"})
                if url.path.endswith("/containers/json"):
                    label = json.loads(parse_qs(url.query).get("filters", ["{}"])[0]).get("label", [""])
                    key, _, value = (label[0] if isinstance(label, list) else label).partition("=")
                    return self._reply(200, [c for c in containers if not key or c["Labels"].get(key) == value])
                return self._reply(404, {"message": "no such container"})

            def _refuse(self) -> None:
                engine.requests.append((self.command, self.path))
                self._reply(405, {"message": "read-only fake"})

            do_POST = do_PUT = do_DELETE = _refuse  # noqa: N815

            def address_string(self) -> str:
                return "unix"

            def log_message(self, *args: object) -> None:
                pass

        self.server = socketserver.ThreadingUnixStreamServer(socket_path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_sidecar_attributes_the_stacks_containers_through_a_docker_socket(database_url, procs, tmp_path):
    import shutil
    import tempfile

    worker, other = "a" * 64, "c" * 64
    containers = [
        {"Id": worker, "Names": ["/qw-cpu-worker-1"], "Labels": {"com.docker.compose.project": "qw"}},
        {"Id": other, "Names": ["/grafana"], "Labels": {"com.docker.compose.project": "monitoring"}},
    ]
    cgroup = tmp_path / "host-cgroup"
    (cgroup / "system.slice").mkdir(parents=True)
    (cgroup / "cgroup.controllers").write_text("cpu memory\n")
    for cid, memory in ((worker, 256 << 20), (other, 512 << 20)):
        group = cgroup / "system.slice" / f"docker-{cid}.scope"
        group.mkdir()
        (group / "cpu.stat").write_text("usage_usec 1000000\n")
        (group / "memory.current").write_text(f"{memory}\n")
    short_dir = tempfile.mkdtemp(prefix="qwd")  # a unix socket path must stay under ~100 bytes
    engine = FakeDockerEngine(f"{short_dir}/docker.sock", containers)
    try:
        port = _free_port()
        env = service_env(database_url, QW_METRICS_QUEUE_SECONDS="0")
        with psycopg.connect(database_url, autocommit=True) as listener:
            listener.execute("LISTEN hw_metrics")
            proc = procs.hw_metrics(env, "--interval", "0.3", "--port", str(port), "--addr", "127.0.0.1", "--host-label", "attr-1",
                                    "--cgroup-root", str(cgroup), "--docker-url", f"unix://{short_dir}/docker.sock", "--compose-project", "qw")

            def attributed() -> dict | None:
                for note in listener.notifies(timeout=1):
                    stack = json.loads(note.payload)["stack"]
                    if stack and (stack["cpu_percent"] or 0) > 0:  # two samples without a bump between read 0.0 under load
                        return stack
                    usage = cgroup / "system.slice" / f"docker-{worker}.scope" / "cpu.stat"  # keep the worker busy
                    used = int(usage.read_text().split()[1])
                    usage.write_text(f"usage_usec {used + 100_000}\n")
                assert proc.poll() is None, procs.logs()
                return None

            stack = wait_until(attributed, timeout=30, what="a notification with the stack's CPU above zero")
        assert [(c["name"], c["memory_bytes"]) for c in stack["containers"]] == [("qw-cpu-worker-1", 256 << 20)]
        assert stack["cgroup_version"] == 2 and stack["memory_bytes"] == 256 << 20 and stack["cpu_percent"] > 0
        metrics = _scrape(port)
        assert metrics[("qw_container_memory_bytes", (("container", "qw-cpu-worker-1"), ("host", "attr-1")))] == 256 << 20
        assert engine.requests and {method for method, _ in engine.requests} == {"GET"}, engine.requests
        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc, 15, procs) == 0, log_text(proc)
    finally:
        engine.close()
        shutil.rmtree(short_dir, ignore_errors=True)
