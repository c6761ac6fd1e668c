"""Least privilege in the running stack: every container drops all capabilities, gains none and
has a read-only root filesystem; migrations ran as a non-superuser owner in the one-shot
`migrate` service; each service logs in as its own role; pg_hba admits other hosts only over TLS
and never as the owner or the superuser; a per-host worker login works and is still only a worker.
Runs after test_readme_stack.py and before test_stack.py (file order), on the session's stack."""

from __future__ import annotations

import json
import subprocess

import psycopg
import pytest
from e2e_support import ROOT
from procs import wait_until
from psycopg import conninfo, errors

import queue_workflows
from queue_workflows import node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
ROLES = {"orchestrator": "qw_orchestrator", "scheduler": "qw_scheduler", "dashboard": "qw_dashboard",
         "cpu-worker": "qw_worker", "ingest-worker": "qw_worker", "hw-metrics": "qw_metrics"}


def _psql(stack, statement: str) -> list[list[str]]:
    """As the superuser, over Postgres's own socket: the one way it may log in."""
    out = stack.compose("exec", "-T", "postgres", "psql", "-U", "postgres", "-d", "qw", "-AtF", "\t", "-c", statement).stdout
    return [line.split("\t") for line in out.splitlines()]


def _dsn(stack, user: str, password: str) -> str:
    """Keywords, not a URL: a base64 password may hold '/' or '+'."""
    port = stack.compose("port", "postgres", "5432").stdout.strip().rsplit(":", 1)[1]
    return conninfo.make_conninfo(host="127.0.0.1", port=port, dbname="qw", user=user, password=password)


def _inspect(container: str) -> dict:
    return json.loads(subprocess.run(["docker", "inspect", container], capture_output=True, text=True, check=True).stdout)[0]


def test_every_container_drops_capabilities_gains_none_and_is_read_only(stack):
    rows = stack.compose("ps", "-a", "-q").stdout.split()
    seen = {}
    for container in rows:
        info = _inspect(container)
        host = info["HostConfig"]
        seen[info["Config"]["Labels"]["com.docker.compose.service"]] = info["State"]["Status"]
        assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd"), (info["Name"], host["CapDrop"], host.get("CapAdd"))
        assert "no-new-privileges:true" in (host.get("SecurityOpt") or []), (info["Name"], host.get("SecurityOpt"))
        assert host["ReadonlyRootfs"] is True, info["Name"]
        assert not host.get("Privileged"), info["Name"]
    assert {"postgres", "migrate", "orchestrator", "scheduler", "dashboard", "cpu-worker", "hw-metrics"} <= set(seen), seen
    assert seen["migrate"] == "exited"
    assert _inspect(stack.compose("ps", "-a", "-q", "migrate").stdout.split()[0])["State"]["ExitCode"] == 0


def test_migrations_ran_as_a_non_superuser_owner_and_services_log_in_as_their_roles(stack):
    roles = {name: (sup, create_role, create_db) for name, sup, create_role, create_db in
             _psql(stack, "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname !~ '^pg_'")}
    assert {name for name, (sup, _, _) in roles.items() if sup == "t"} == {"postgres"}, roles
    assert roles["qw"] == ("f", "f", "f") and roles["qw_orchestrator"] == ("f", "f", "f"), roles
    owners = _psql(stack, "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
    assert owners == [["qw"]]
    assert _psql(stack, "SELECT usename FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = 'qw'") == []

    found: dict[str, set[str]] = {}

    def connected() -> dict[str, set[str]] | None:  # seen over a minute: some services connect now and then
        for service in ROLES:
            for container in stack.containers(service):
                ip = next(iter(_inspect(container)["NetworkSettings"]["Networks"].values()))["IPAddress"]
                rows = _psql(stack, f"SELECT DISTINCT usename FROM pg_stat_activity WHERE client_addr = '{ip}'")
                found.setdefault(service, set()).update(r[0] for r in rows)
        return found if all(found.get(s) for s in ROLES) else None

    wait_until(connected, timeout=60, interval=1, what="every service's connections")
    assert found == {service: {role} for service, role in ROLES.items()}, found


def test_remote_hosts_need_tls_and_never_log_in_as_the_owner(stack):
    rules = _psql(stack, "SELECT type, array_to_string(user_name, ','), coalesce(address, ''), auth_method"
                         " FROM pg_hba_file_rules ORDER BY line_number")
    # Any address beyond the container's socket, its loopback and its own networks (samenet):
    remote = [r for r in rules if r[2] not in ("", "127.0.0.1", "::1", "samenet") and r[3] != "reject"]
    assert remote, rules
    for kind, users, _, method in remote:
        assert kind == "hostssl" and method == "scram-sha-256", rules
        assert users.split(",") and all(u.startswith("+qw_") for u in users.split(",")), rules  # never all, the owner, postgres
    # Through the published port the owner and the superuser are refused outright, passwords or not.
    owner_password = (stack.secrets / "postgres_password").read_text().strip()
    for user in ("qw", "postgres"):
        with pytest.raises(psycopg.OperationalError, match="pg_hba.conf"):
            psycopg.connect(_dsn(stack, user, owner_password), connect_timeout=5).close()


def test_the_worker_role_works_the_queue_but_cannot_touch_the_control_plane(stack):
    url = stack.url("worker")
    queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch", "load"}))
    queue_workflows.register_ingest_task("demo.fetch_page", lambda reason, args: {})
    job = node_queue.enqueue_ingest_job("demo.fetch_page", "fetch", {"url": "https://security.invalid/"})["id"]
    with psycopg.connect(url, autocommit=True) as conn:
        wait_until(lambda: conn.execute("SELECT status FROM ingest_jobs_all WHERE id = %s", (job,)).fetchone()[0] == "completed",
                   timeout=60, interval=0.3, what="a job enqueued as the worker role")
        for statement in ("DELETE FROM queue_schema_version", "UPDATE qw_leadership SET epoch = epoch + 1",
                          "DELETE FROM qw_orchestrators", "CREATE TABLE evil (id int)", "COPY (SELECT 1) TO PROGRAM 'true'"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)


def test_a_host_of_its_own_logs_in_as_a_member_of_qw_worker(stack):
    ran = subprocess.run([str(ROOT / "deploy" / "add-host-roles.sh"), "e2ebox"], cwd=ROOT, env=stack.env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    password = (stack.secrets / "hosts" / "e2ebox" / "worker_db_password").read_text().strip()
    assert (stack.secrets / "hosts" / "e2ebox" / "worker_db_password").stat().st_mode & 0o007 == 0  # not world-readable
    with psycopg.connect(_dsn(stack, "qw_worker_e2ebox", password), autocommit=True) as conn:
        assert conn.execute("SELECT current_user, pg_has_role('qw_worker', 'member')").fetchone() == ("qw_worker_e2ebox", True)
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("DELETE FROM queue_schema_version")
    again = subprocess.run([str(ROOT / "deploy" / "add-host-roles.sh"), "e2ebox"], cwd=ROOT, env=stack.env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr  # idempotent: the role stays, its password is reasserted
    assert password not in ran.stdout + ran.stderr + again.stdout + again.stderr


def test_no_service_was_refused_a_privilege_while_the_demo_ran(stack):
    def demo_done() -> bool:
        with psycopg.connect(stack.url(), autocommit=True) as conn:
            return conn.execute("SELECT count(*) FILTER (WHERE status <> 'completed') = 0 AND count(*) > 0"
                                " FROM ingest_jobs_all WHERE reason = 'demo'").fetchone()[0]

    wait_until(demo_done, timeout=180, interval=1, what="the demo's jobs")
    services = [s for s in stack.compose("config", "--services").stdout.split() if s != "postgres"]  # its log has our probes
    logs = stack.compose("logs", "--no-color", *services).stdout
    refused = [line for line in logs.splitlines() if "permission denied" in line.lower() or "insufficient" in line.lower()]
    assert refused == [], refused[:20]
