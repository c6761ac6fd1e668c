"""Three hosts as an operator deploys them: the head (README.md's compose block) and two remote
boxes (deploy/README.md's "Adding a host" block, run as written with its `# per host` values: a
CPU box with logins of its own, "A host's own credentials", and an NVIDIA box in CPU fallback),
each a compose project of its own on a network of its own, reaching the head only through its
published Postgres port, by the name its certificate holds, over TLS verify-full.

The remote projects resolve the head's name to the Docker host (`extra_hosts: host-gateway`), as
a LAN's DNS would resolve head.lan: that override file, the CPU-fallback one, the project names
and metrics ports (three stacks share one machine) and the CPU box's two login names are all the
test adds. On one machine Docker masquerades a remote host's connections to the head network's
gateway address, so Postgres's pg_hba sees them as local (a real LAN keeps their address and
they meet its `hostssl` line): TLS here is the clients' own verify-full, checked in pg_stat_ssl.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from e2e_support import rows
from operator_docs import Host, block_under, clean_env, copy_of_the_repository, with_per_host_values
from procs import wait_until

import queue_workflows
import qw_demo
from queue_workflows import node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
# label: (role, extra compose files)
REMOTES = {"cpu1": ("cpu", ()), "gpu-nv1": ("gpu-nvidia", ("tests/e2e/compose.gpu-cpu-fallback.yaml",))}
# cpu1 logs in as its own roles (deploy/README's "A host's own credentials" block makes them); gpu-nv1
# shares qw_worker and qw_metrics with the head.
OWN_LOGINS = {"cpu1": {"QW_DB_WORKER_USER": "qw_worker_cpu1", "QW_DB_METRICS_USER": "qw_metrics_cpu1"}}
QUEUES = {"cpu1": {"cpu", "fetch", "load"}, "gpu-nv1": {"cpu", "fetch", "load", "gpu"}}
REMOTE_SERVICES = ("cpu-worker", "ingest-worker", "ingest-worker-2", "gpu-worker-cuda", "gpu-worker-rocm", "hw-metrics")


def _head_url(head: Host) -> str:
    port = head.compose("port", "postgres", "5432").stdout.strip().rsplit(":", 1)[1]
    password = (head.repo / "deploy" / "secrets" / "orchestrator_db_password").read_text().strip()
    return f"host=127.0.0.1 port={port} dbname=qw user=qw_orchestrator password={password}"


def _lan_override(repo: Path, head_name: str) -> str:
    """What the LAN's DNS does for a real box: the head's name resolves to the head (here, the Docker host)."""
    body = "".join(f"  {service}:\n    extra_hosts: [\"{head_name}:host-gateway\"]\n" for service in REMOTE_SERVICES)
    (repo / "compose.lan.yaml").write_text(f"# The head's name on this LAN (test only).\nservices:\n{body}")
    return "compose.lan.yaml"


def _join(head: Host, label: str, tmp: Path) -> Host:
    _, extra = REMOTES[label]
    repo = copy_of_the_repository(tmp / label)
    # The operator's copies from the head: its CA and the two passwords every host shares.
    (repo / "deploy" / "ca").mkdir(parents=True, exist_ok=True)
    (repo / "deploy" / "ca" / "ca.crt").write_bytes((head.repo / "deploy" / "ca" / "ca.crt").read_bytes())
    (repo / "deploy" / "secrets").mkdir(parents=True, exist_ok=True)
    secrets = head.repo / "deploy" / "secrets" / ("hosts/" + label if label in OWN_LOGINS else "")
    for name in ("worker_db_password", "metrics_db_password"):
        (repo / "deploy" / "secrets" / name).write_bytes((secrets / name).read_bytes())
    head_name = socket.gethostname()  # the name README's block gave deploy/make-tls.sh
    files = ":".join(("compose.yaml", _lan_override(repo, head_name), *extra))
    return Host(label, repo, clean_env(COMPOSE_PROJECT_NAME=f"qwe2e{label.replace('-', '')}{uuid.uuid4().hex[:6]}",
                                       COMPOSE_FILE=files, QW_METRICS_PUBLISH="127.0.0.1:", **OWN_LOGINS.get(label, {})))


@pytest.fixture(scope="module")
def hosts(operator_head, tmp_path_factory):
    head = operator_head
    url = _head_url(head)
    port = head.compose("port", "postgres", "5432").stdout.strip().rsplit(":", 1)[1]
    head.run(block_under("A host's own credentials").code, "host roles")
    block = block_under("Adding a host")
    remotes = {label: _join(head, label, tmp_path_factory.mktemp("hosts")) for label in REMOTES}
    registered: dict[str, float] = {}
    try:
        with ThreadPoolExecutor(len(remotes)) as pool:
            started = time.monotonic()
            runs = {label: pool.submit(host.run, with_per_host_values(block, {
                "role": REMOTES[label][0], "label": label, "head": socket.gethostname(), "port": port}), "up", 600)
                for label, host in remotes.items()}

            def all_registered() -> bool:
                for failed in (f for f in runs.values() if f.done() and f.exception()):
                    raise failed.exception()  # type: ignore[misc]
                for label, queues in QUEUES.items():
                    seen = {r["queue"] for r in rows(url, "SELECT queue FROM worker_heartbeats WHERE host_label = %s", (label,))}
                    if label not in registered and seen >= queues:
                        registered[label] = time.monotonic() - started
                return len(registered) == len(QUEUES)

            wait_until(all_registered, timeout=600, interval=0.5, what="every remote host's workers to register")
            for future in runs.values():
                future.result()
        for label, host in remotes.items():
            print(f"\n{label} up (deploy/README's 'Adding a host' block, --wait): {host.seconds['up']:.1f}s; "
                  f"its workers registered after {registered[label]:.1f}s", end="")
        yield head, remotes, url
    finally:
        for host in remotes.values():
            host.down()


def _enqueue(url: str, count: int, tag: str) -> list[int]:
    queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch", "load"}))
    queue_workflows.register_ingest_task("demo.fetch_page", qw_demo.fetch_page)
    return [node_queue.enqueue_ingest_job("demo.fetch_page", "fetch", {"url": f"https://{tag}.invalid/{i}"})["id"] for i in range(count)]


def _finished(url: str, ids: list[int]) -> list[dict]:
    def done() -> list[dict] | None:
        found = rows(url, "SELECT status, claimed_by, created_at, started_at, finished_at FROM ingest_jobs_all WHERE id = ANY(%s)", (ids,))
        return found if all(r["status"] in ("completed", "failed", "cancelled") for r in found) else None

    found = wait_until(done, timeout=120, interval=0.2, what=f"{len(ids)} jobs")
    assert {r["status"] for r in found} == {"completed"}, found
    return found


def _by_host(found: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in found:
        counts[row["claimed_by"].split(":", 1)[0]] = counts.get(row["claimed_by"].split(":", 1)[0], 0) + 1
    return counts


def _networks(host: Host) -> list[str]:
    return subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=com.docker.compose.project={host.env['COMPOSE_PROJECT_NAME']}"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_the_remote_hosts_reach_the_head_only_over_tls(hosts):
    head, remotes, _ = hosts
    for label, host in remotes.items():
        for container in host.compose("ps", "-q").stdout.split():
            dsn = subprocess.run(["docker", "exec", container, "printenv", "QW_DATABASE_URL"], capture_output=True, text=True,
                                 check=True).stdout
            assert f"@{socket.gethostname()}:" in dsn and "sslmode=verify-full" in dsn, dsn
        # On networks of its own: no container of this host is on any of the head's.
        own = set(host.compose("ps", "-q").stdout.split())
        for network in _networks(head):
            attached = subprocess.run(["docker", "network", "inspect", "-f", "{{range $id, $c := .Containers}}{{$id}} {{end}}", network],
                                      capture_output=True, text=True, check=True).stdout.split()
            assert own and not own & set(attached), (label, network)
    # As the superuser, over Postgres's socket. On one machine Docker masquerades a remote host's
    # connection to the head network's gateway (a real LAN keeps its address), so a connection is
    # told by its role, and by not coming from one of the head's containers.
    head_ips = {ip for c in head.compose("ps", "-q").stdout.split() for ip in subprocess.run(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", c],
        capture_output=True, text=True, check=True).stdout.split()}
    outside: list[list[str]] = []
    wanted = {"qw_worker_cpu1", "qw_metrics_cpu1", "qw_worker", "qw_metrics"}

    def every_remote_role_seen() -> bool:  # the sidecars connect now and then, not all the time
        seen = [line.split() for line in head.compose(
            "exec", "-T", "postgres", "psql", "-U", "postgres", "-d", "qw", "-At", "-F", " ", "-c",
            "SELECT host(a.client_addr), a.usename, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
            "WHERE a.datname = current_database() AND a.client_addr IS NOT NULL").stdout.splitlines()]
        outside.extend(row for row in seen if row[0] not in head_ips)
        return wanted <= {user for _, user, _ in outside}

    wait_until(every_remote_role_seen, timeout=60, interval=1, what=f"connections of {sorted(wanted)} from outside the head")
    assert all(ssl == "t" for _, _, ssl in outside), outside


def test_work_spreads_over_every_host_and_each_sidecar_reports(hosts):
    _, remotes, url = hosts
    ids = _enqueue(url, 60, "spread")
    found = _finished(url, ids)
    counts = _by_host(found)
    latencies = [(r["finished_at"] - r["created_at"]).total_seconds() for r in found]
    span = (max(r["finished_at"] for r in found) - min(r["created_at"] for r in found)).total_seconds()
    print(f"\n60 jobs over 3 hosts: {len(found) / span:.1f} jobs/s, latency p50 {statistics.median(latencies):.2f}s "
          f"p95 {statistics.quantiles(latencies, n=20)[-1]:.2f}s; by host {counts}")
    assert set(counts) == {"head", *remotes}, counts
    metrics = {r["host_label"]: r for r in rows(url, "SELECT host_label, payload, now() - sampled_at AS age FROM host_metrics")}
    assert {"head", *remotes} <= set(metrics), sorted(metrics)
    for label in ("head", *remotes):
        assert metrics[label]["age"].total_seconds() < 60, (label, metrics[label]["age"])


def test_a_remote_worker_switched_off_from_the_head_claims_nothing_until_on(hosts):
    head, _, url = hosts
    state = "SELECT state FROM worker_heartbeats WHERE host_label = 'cpu1' AND queue = 'fetch'"
    started = time.monotonic()
    head.compose("exec", "-T", "orchestrator", "qw", "worker", "off", "--queue", "fetch", "--host", "cpu1", "--policy", "park")
    issued = time.monotonic() - started
    since_written = ("SELECT extract(epoch FROM now() - updated_at) AS s FROM worker_controls "
                     "WHERE host_label = 'cpu1' AND queue = 'fetch' AND desired_state = 'off'")
    wait_until(lambda: {r["state"] for r in rows(url, state)} == {"parked"}, timeout=30, interval=0.05, what="cpu1's fetch worker to park")
    effect = float(rows(url, since_written)[0]["s"])  # on Postgres's clock: the switch's commit to the parked beat seen
    parked = time.monotonic() - started
    print(f"\nqw worker off (docker compose exec in the head's orchestrator): {issued:.2f}s; cpu1's worker seen parked "
          f"{effect:.2f}s after the switch was written ({parked:.2f}s after the command began)")
    counts = _by_host(_finished(url, _enqueue(url, 30, "off")))
    assert "cpu1" not in counts and {"head", "gpu-nv1"} <= set(counts), counts

    head.compose("exec", "-T", "orchestrator", "qw", "worker", "on", "--queue", "fetch", "--host", "cpu1")
    wait_until(lambda: {r["state"] for r in rows(url, state)} - {"parked"}, timeout=30, interval=0.05, what="cpu1's fetch worker to resume")
    claimed: dict[str, int] = {}

    def cpu1_claims() -> bool:  # the peers may take a small batch alone: a bounded number of batches
        for host, n in _by_host(_finished(url, _enqueue(url, 20, "on"))).items():
            claimed[host] = claimed.get(host, 0) + n
        return "cpu1" in claimed

    wait_until(cpu1_claims, timeout=120, interval=0, what="cpu1's fetch worker to claim again")
    print(f"\nafter ON: by host {claimed}")
