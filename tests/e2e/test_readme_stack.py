"""The operator's documents run as written: README.md's compose block sets up the head (the
session's `operator_head`, in a copy of the repository), then every ```sh block of
deploy/README.md runs on it in document order (secrets, a host's own logins, TLS, the upgrade,
your own application, a backup, the air-gapped wheelhouse). "Adding a host" runs on two more copies in
test_multi_host.py. What each block promises is checked after it; the last test takes the head
down and finds nothing left."""

from __future__ import annotations

import re
import subprocess

import pytest
from operator_docs import Block, Host, shell_blocks

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
RUN_ELSEWHERE = {"Running the stack with Docker Compose": "conftest.py's operator_head", "Adding a host": "test_multi_host.py"}


def _blocks_here() -> list[Block]:
    return [b for b in shell_blocks() if b.heading not in RUN_ELSEWHERE]


def _psql(head: Host, statement: str) -> str:
    return head.compose("exec", "-T", "postgres", "psql", "-U", "postgres", "-d", "qw", "-At", "-c", statement).stdout


def _images(head: Host) -> dict[str, str]:
    found = {}
    for container in head.compose("ps", "-q").stdout.split():
        service, image = subprocess.run(["docker", "inspect", "-f", '{{index .Config.Labels "com.docker.compose.service"}} {{.Config.Image}}',
                                         container], capture_output=True, text=True, check=True).stdout.split()
        found[service] = image
    return found


def test_every_block_is_run_by_some_test():
    headings = [b.heading for b in shell_blocks()]
    for heading, where in RUN_ELSEWHERE.items():
        assert headings.count(heading) == 1, f"{where} runs the one sh block under {heading!r}; found {headings.count(heading)}"
    assert {"Secrets", "TLS", "Upgrades", "Your own application", "Backups", "Air-gapped builds"} <= {b.heading for b in _blocks_here()}


def test_the_readme_head_is_up_leading_and_its_secrets_are_private(operator_head):
    # `qw status` ran inside the orchestrator: the leader and the schema answered.
    assert "leader" in operator_head.readme.stdout, operator_head.readme.stdout[-3000:]
    modes = {f.name: f.stat().st_mode & 0o777 for f in (operator_head.repo / "deploy" / "secrets").glob("*password")}
    assert modes and all(mode & 0o007 == 0 for mode in modes.values()), modes


def _after_secrets(head: Host) -> None:
    files = sorted((head.repo / "deploy" / "secrets").glob("*password"))
    assert len(files) == 7 and all(f.stat().st_mode & 0o777 == 0o640 and f.stat().st_gid == 10001 for f in files), files


def _after_host_roles(head: Host) -> None:
    assert sorted((head.repo / "deploy" / "secrets" / "hosts" / "cpu1").iterdir())
    members = _psql(head, "SELECT r.rolname || ' ' || g.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member "
                          "JOIN pg_roles g ON g.oid = m.roleid WHERE r.rolname LIKE '%\\_cpu1'").split("\n")
    assert {"qw_worker_cpu1 qw_worker", "qw_metrics_cpu1 qw_metrics"} <= set(members), members


def _served_names(head: Host) -> str:
    port = head.compose("port", "postgres", "5432").stdout.strip().rsplit(":", 1)[1]
    served = subprocess.run(["openssl", "s_client", "-starttls", "postgres", "-connect", f"127.0.0.1:{port}",
                             "-CAfile", str(head.repo / "deploy" / "ca" / "ca.crt"), "-verify_return_error"],
                            input="", capture_output=True, text=True, timeout=30)
    assert "Verify return code: 0 (ok)" in served.stdout, served.stdout[-2000:] + served.stderr[-2000:]
    pem = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", served.stdout, re.S)
    assert pem, served.stdout[-2000:]
    return subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName"], input=pem.group(0), capture_output=True,
                          text=True, check=True).stdout


def _after_tls(head: Host) -> None:
    names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(head.repo / "deploy" / "tls" / "server.crt")],
                           capture_output=True, text=True, check=True).stdout
    assert "DNS:head.lan" in names and "IP Address:192.168.1.10" in names and "DNS:postgres" in names, names


def _after_reload(head: Host) -> None:
    names = _served_names(head)  # the certificate Postgres now serves, verified against the CA
    assert "DNS:head.lan" in names and "IP Address:192.168.1.10" in names, names


def _after_upgrade(head: Host) -> None:
    assert "QW_IMAGE_TAG=v2" in (head.repo / ".env").read_text().splitlines()
    images = {service: image for service, image in _images(head).items() if service != "postgres"}
    assert len(images) >= 8 and all(image.endswith(":v2") for image in images.values()), images
    assert "leader" in head.compose("exec", "-T", "orchestrator", "qw", "status").stdout


def _after_app(head: Host) -> None:
    images = _images(head)
    assert all(images[s].startswith("my-app/") for s in ("orchestrator", "scheduler", "cpu-worker", "dashboard", "hw-metrics")), images
    head.compose("exec", "-T", "cpu-worker", "python", "-c", "import os, qw_example_app; assert os.environ['QW_APP'] == 'qw_example_app'")


def _after_backup(head: Host) -> None:
    [dump] = head.repo.glob("qw-*.dump")
    with dump.open("rb") as archive:
        listed = subprocess.run(["docker", "compose", "exec", "-T", "postgres", "pg_restore", "-l"], cwd=head.repo, env=head.env,
                                stdin=archive, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "TABLE public ingest_jobs" in listed.stdout, listed.stdout[-2000:] + listed.stderr[-2000:]


def _after_wheelhouse(head: Host) -> None:
    wheels = {w.name.split("-")[0].lower() for w in (head.repo / "docker" / "wheelhouse").glob("*.whl")}
    assert {"psycopg", "itsdangerous", "setuptools", "wheel"} <= wheels and "queue_workflows" not in wheels, sorted(wheels)


CHECKS = {"Secrets": [_after_secrets], "A host's own credentials": [_after_host_roles], "TLS": [_after_tls, _after_reload],
          "Upgrades": [_after_upgrade], "Your own application": [_after_app], "Backups": [_after_backup],
          "Air-gapped builds": [_after_wheelhouse]}


@pytest.mark.parametrize("block", _blocks_here(), ids=lambda b: f"{b.heading}:{b.line}")
def test_each_deploy_readme_block_runs_as_written_on_the_head(operator_head, block):
    operator_head.run(block.code, block.where, timeout=600)
    print(f"\n{block.where}: {operator_head.seconds[block.where]:.1f}s", end="")
    checks = CHECKS.get(block.heading, [])
    # A heading with two blocks: the first check goes with the first block, the second with the second.
    same = [b for b in _blocks_here() if b.heading == block.heading]
    for check in checks[same.index(block):same.index(block) + 1] if len(same) > 1 else checks:
        check(operator_head)


def test_the_head_comes_down_and_leaves_nothing(operator_head):
    try:
        operator_head.down()
        assert operator_head.left_over() == []
    finally:
        tags = [f"{prefix}/{image}:v2" for prefix in ("my-app", "queue-workflows") for image in
                ("orchestrator", "scheduler", "cpu-worker", "dashboard", "hw-metrics", "gpu-worker-cuda", "gpu-worker-rocm")]
        subprocess.run(["docker", "image", "rm", *tags], capture_output=True, timeout=120)
