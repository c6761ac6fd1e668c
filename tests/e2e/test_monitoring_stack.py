"""The `monitoring` profile (deploy/compose.monitoring.yaml): docs/monitoring.md's "The monitoring
profile in the compose stack" run as written on the session's README head (conftest.py's
`operator_head`, so no head of its own is brought up), then checked through Prometheus's HTTP
API: every configured target is up, the alert rules are loaded, and every metric the Grafana
dashboard and the rules read has been scraped. The last test stops Prometheus (its graceful
SIGTERM) and the fixture leaves the head as it found it, for test_multi_host and test_readme_stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
from e2e_support import ROOT, poll
from operator_docs import Block, Host, section_blocks, with_per_host_values
from promql_names import PROMETHEUS_OWN, families, used_names

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SECTION = "## The monitoring profile in the compose stack"
IMAGE = "qw-monitoring/prometheus:2.42"
TARGETS = "deploy/monitoring/targets/hw-metrics.yml"
SECOND_LABEL = "e2e-second-sidecar"


def blocks() -> list[Block]:
    found = section_blocks("docs/monitoring.md", SECTION)
    assert len(found) == 3, [b.where for b in found]  # up; the targets and alerts; adding a host
    return found


def api(head: Host, path: str) -> dict:
    port = head.compose("port", "prometheus", "9090").stdout.strip().rsplit(":", 1)[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]


@pytest.fixture(scope="module")
def head(operator_head: Host) -> Iterator[Host]:
    started = time.monotonic()
    flags = os.environ.get("QW_BUILD_FLAGS", "").split()
    subprocess.run(["docker", "build", *flags, "-q", "-t", IMAGE, "."], cwd=ROOT / "deploy" / "prometheus", check=True,
                   capture_output=True, timeout=900)
    print(f"\n{IMAGE} (deploy/prometheus/Dockerfile): {time.monotonic() - started:.1f}s")
    env_file, targets = operator_head.repo / ".env", operator_head.repo / TARGETS
    before = env_file.read_text(), targets.read_text()
    operator_head.env["QW_PROMETHEUS_PUBLISH"] = "127.0.0.1:"  # a free port, as the fixture's others
    try:
        yield operator_head
    finally:
        # The head as the other modules expect it: no Prometheus, its volume gone, .env and the targets as they were.
        if "deploy/compose.monitoring.yaml" in env_file.read_text():
            operator_head.compose("rm", "-s", "-f", "-v", "prometheus", check=False)
        project = operator_head.env["COMPOSE_PROJECT_NAME"]
        subprocess.run(["docker", "volume", "rm", "-f", f"{project}_prometheus-data"], capture_output=True, timeout=60)
        env_file.write_text(before[0])
        targets.write_text(before[1])
        operator_head.env.pop("QW_PROMETHEUS_PUBLISH")
        print(f"\nmonitoring e2e: {time.monotonic() - started:.1f}s ({ {k: round(v, 1) for k, v in operator_head.seconds.items()} })")


def test_the_section_turns_prometheus_on(head):
    up = blocks()[0]
    head.run(up.code, up.where, timeout=600)
    print(f"\n{up.where}: {head.seconds[up.where]:.1f}s")
    assert "COMPOSE_PROFILES=head,cpu,monitoring" in (head.repo / ".env").read_text().splitlines()
    user = head.compose("exec", "-T", "prometheus", "id", "-u").stdout.strip()
    assert user == "65534", user  # nobody, as the official image
    rules = [r["name"] for group in api(head, "/api/v1/rules")["groups"] for r in group["rules"]]
    assert sorted(rules) == sorted({"QwQueueOldestJobTooOld", "QwWorkerDead", "QwNoLeadingOrchestrator", "QwTaskFailingRate",
                                    "QwGpuMemoryNearFull", "QwHostSilent"}), rules


def test_the_documented_queries_answer(head):
    def scraped_once() -> bool:
        found = api(head, "/api/v1/targets?state=active")["activeTargets"]
        return bool(found) and all(not t["lastScrape"].startswith("0001-") for t in found)

    poll("a first scrape of every target (up answers nothing before it, as the section says)", scraped_once, 60, 1)
    queries = blocks()[1]
    ran = head.run(queries.code, queries.where, timeout=120)
    assert 'job="qw-hw-metrics"' in ran.stdout and 'host="head"' in ran.stdout, ran.stdout[-3000:]


def test_a_host_added_to_the_targets_is_scraped_without_a_restart(head):
    add = blocks()[2]
    # The head's own sidecar container under a second name and label: the one other address this Prometheus reaches.
    address = f"{head.env['COMPOSE_PROJECT_NAME']}-hw-metrics-1:9464"
    head.run(with_per_host_values(add, {"label": SECOND_LABEL, "address": address}), add.where, timeout=60)

    def scraped() -> dict | None:
        found = [t for t in api(head, "/api/v1/targets?state=active")["activeTargets"] if t["labels"].get("host") == SECOND_LABEL]
        return found[0] if found and found[0]["health"] == "up" else None

    target = poll("the added host's sidecar to be scraped", scraped, 150, 2)
    assert target["labels"]["job"] == "qw-hw-metrics" and target["scrapeUrl"] == f"http://{address}/metrics", target


def test_every_configured_target_is_up(head):
    def targets() -> list[dict]:
        return api(head, "/api/v1/targets?state=active")["activeTargets"]

    def all_up() -> list[dict] | None:
        found = targets()
        return found if found and all(t["health"] == "up" for t in found) else None

    try:
        found = poll("every target to be up", all_up, 90, 2)
    except AssertionError:
        down = {t["scrapeUrl"]: (t["health"], t["lastError"]) for t in targets() if t["health"] != "up"}
        raise AssertionError(f"targets not up after 90 s: {down}") from None
    jobs = {t["labels"]["job"] for t in found}
    assert jobs == {"qw-hw-metrics", "qw-orchestrator", "prometheus"}, jobs


def test_every_metric_the_dashboard_and_the_rules_read_has_been_scraped(head):
    used = used_names()

    def missing() -> dict[str, list[str]]:
        scraped = set(api(head, "/api/v1/metadata")) | set(api(head, "/api/v1/label/__name__/values"))
        return {name: sorted(where) for name, where in sorted(used.items()) if not set(families(name)) & scraped}

    try:
        poll("every metric read to be scraped", lambda: not missing(), 60, 3)
    except AssertionError:
        absent = missing()
        raise AssertionError(f"{len(absent)} of {len(used)} metrics read by the dashboard or the rules are in no scrape: "
                             f"{sorted(absent)}\nwhere: {absent}") from None
    assert "up" in PROMETHEUS_OWN and api(head, "/api/v1/query?query=up")["result"]


def test_prometheus_stops_gracefully_on_sigterm(head):
    container = head.compose("ps", "-q", "prometheus").stdout.strip()
    head.compose("stop", "prometheus", timeout=120)
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", container], capture_output=True, text=True,
                           check=True).stdout.strip()
    logs = head.compose("logs", "--no-color", "prometheus").stdout
    assert state == "0" and "Received SIGTERM, exiting gracefully" in logs and "See you next time!" in logs, (state, logs[-2000:])
