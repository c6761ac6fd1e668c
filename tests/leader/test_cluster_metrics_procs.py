"""Real orchestrator processes serve /metrics: the leader the cluster, a standby only its role; kill -9 moves it all."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
import qw_test_app
from procs import log_text, query, service_env, wait_until
from prometheus_client.parser import text_string_to_metric_families

from queue_workflows import node_queue, register_ingest_task

STANDBY_FAMILIES = {"qw_cluster_is_leader", "qw_cluster_leader_term", "qw_cluster_database_up"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]] | None:
    """{sample name: {labels: value}} from the endpoint; None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def answer(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """A scrape that must succeed (retried while a loaded host is slow to answer)."""
    return wait_until(lambda: scrape(port), timeout=20, what=f"an answer from :{port}/metrics")


def one(samples: dict | None, name: str, **labels: str) -> float | None:
    return None if samples is None else samples.get(name, {}).get(tuple(sorted(labels.items())))


def orchestrator_env(database_url: str, port: int) -> dict[str, str]:
    return service_env(database_url, QW_ORCHESTRATOR_METRICS_PORT=str(port), QW_ORCHESTRATOR_METRICS_HOST="127.0.0.1",
                       QW_ORCHESTRATOR_METRICS_INTERVAL_SECONDS="0.2", QW_LOG_LEVEL="INFO")


def test_the_leader_serves_the_cluster_a_standby_its_role_and_a_kill_moves_both(database_url, procs) -> None:
    pa, pb = free_port(), free_port()
    a = procs.orchestrator(orchestrator_env(database_url, pa))
    leader = wait_until(lambda: (s := scrape(pa)) and one(s, "qw_cluster_is_leader") == 1 and "qw_cluster_last_sample_timestamp_seconds" in s and s,
                        timeout=60, what="the first orchestrator to lead and sample")
    term = one(leader, "qw_cluster_leader_term")
    b = procs.orchestrator(orchestrator_env(database_url, pb))
    standby = wait_until(lambda: (s := scrape(pb)) and one(s, "qw_cluster_database_up") == 1 and s, timeout=60, what="the standby's endpoint")
    assert one(standby, "qw_cluster_is_leader") == 0 and one(standby, "qw_cluster_leader_term") == term
    with urllib.request.urlopen(f"http://127.0.0.1:{pb}/metrics", timeout=10) as response:
        declared = {line.split()[2] for line in response.read().decode().splitlines() if line.startswith("# TYPE qw_")}
    assert declared == STANDBY_FAMILIES, sorted(declared)
    assert "process_cpu_seconds_total" in standby

    # A worker killed mid-job (SIGKILL, as the OOM killer would): the leader's sweep takes the job back and counts it.
    register_ingest_task("kill_self", qw_test_app.kill_self)
    node_queue.enqueue_ingest_job("kill_self", "fetch", {"token": "t1"}, max_attempts=2)
    worker = procs.worker(service_env(database_url), "fetch")
    wait_until(lambda: worker.poll() is not None, timeout=60, what="the worker to kill itself")
    assert worker.returncode == -signal.SIGKILL
    wait_until(lambda: one(scrape(pa), "qw_cluster_job_reclaims_total", queue="fetch") == 1, timeout=30, what="the reclaim on the leader's /metrics")
    jobs = query(database_url, "SELECT status FROM ingest_jobs")
    assert [r["status"] for r in jobs] == ["queued"]
    wait_until(lambda: one(scrape(pa), "qw_cluster_queue_jobs", queue="fetch", status="queued") == 1, timeout=10, what="the requeued job")
    assert "qw_cluster_job_reclaims_total" not in answer(pb)  # never counted twice

    os.kill(a.pid, signal.SIGKILL)
    a.wait(timeout=10)
    took = wait_until(lambda: (s := scrape(pb)) and one(s, "qw_cluster_is_leader") == 1 and "qw_cluster_last_sample_timestamp_seconds" in s and s,
                      timeout=30, what="the standby to take over and sample the cluster")
    assert one(took, "qw_cluster_leader_term") == (term or 0) + 1
    assert one(took, "qw_cluster_queue_jobs", queue="fetch", status="queued") == 1
    assert "qw_cluster_job_reclaims_total" not in took  # a new term counts from zero
    assert "serving cluster metrics on http://127.0.0.1" in log_text(b)


@pytest.mark.parametrize(("env", "message"), [
    ({"QW_ORCHESTRATOR_METRICS_PORT": "70000"}, "QW_ORCHESTRATOR_METRICS_PORT"),
    ({"QW_ORCHESTRATOR_METRICS_INTERVAL_SECONDS": "0"}, "QW_ORCHESTRATOR_METRICS_INTERVAL_SECONDS"),
    ({"QW_ORCHESTRATOR_METRICS_MAX_TASKS": "0"}, "QW_ORCHESTRATOR_METRICS_MAX_TASKS"),
    ({"QW_ORCHESTRATOR_METRICS_HOST": "bad host"}, "QW_ORCHESTRATOR_METRICS_HOST"),
    ({"QW_ORCHESTRATOR_METRICS_PORT": "busy"}, "cannot listen on 127.0.0.1:"),
])
def test_bad_metrics_settings_stop_the_orchestrator_at_start_with_the_setting_named(database_url, env, message) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        if env.get("QW_ORCHESTRATOR_METRICS_PORT") == "busy":
            env = {"QW_ORCHESTRATOR_METRICS_PORT": str(held.getsockname()[1]), "QW_ORCHESTRATOR_METRICS_HOST": "127.0.0.1"}
        done = subprocess.run([sys.executable, "-m", "qw_services.orchestrator"], env=service_env(database_url, **env),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert query(database_url, "SELECT count(*) AS n FROM qw_orchestrators")[0]["n"] == 0  # it never got as far as the election


def test_a_frozen_leader_resumed_after_a_takeover_drops_to_the_standby_set(database_url, procs) -> None:
    pa, pb = free_port(), free_port()
    fast = {"QW_LEADER_LEASE_SECONDS": "1"}
    a = procs.orchestrator({**orchestrator_env(database_url, pa), **fast})
    wait_until(lambda: one(scrape(pa), "qw_cluster_is_leader") == 1, timeout=60, what="the first orchestrator to lead")
    term = one(answer(pa), "qw_cluster_leader_term")
    b = procs.orchestrator({**orchestrator_env(database_url, pb), **fast})
    wait_until(lambda: one(scrape(pb), "qw_cluster_database_up") == 1, timeout=60, what="the standby's endpoint")
    os.kill(a.pid, signal.SIGSTOP)  # frozen: its lease lapses, the standby takes the next term
    try:
        wait_until(lambda: one(scrape(pb), "qw_cluster_is_leader") == 1, timeout=30, what="the standby to take over")
    finally:
        os.kill(a.pid, signal.SIGCONT)
    wait_until(lambda: one(scrape(pa), "qw_cluster_is_leader") == 0 and one(scrape(pa), "qw_cluster_leader_term") == (term or 0) + 1,
               timeout=30, what="the resumed leader to serve the standby set with the new term")
    with urllib.request.urlopen(f"http://127.0.0.1:{pa}/metrics", timeout=10) as response:
        declared = {line.split()[2] for line in response.read().decode().splitlines() if line.startswith("# TYPE qw_")}
    assert declared == STANDBY_FAMILIES and one(answer(pb), "qw_cluster_is_leader") == 1
    assert a.poll() is None and b.poll() is None, procs.logs()
