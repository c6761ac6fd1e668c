"""The monitoring profile's Prometheus files through Debian's promtool: the rules and the scrape
config check, and the rules' unit tests (each alert firing and not firing) pass. Without promtool
these skip, saying why, except in CI (`CI` set), where .ci/run installs it and a skip would hide them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "rules" / "queue-workflows.yml"
RULE_TESTS = MONITORING / "rules" / "queue-workflows.test.yml"
ALERTS = {"QwQueueOldestJobTooOld", "QwWorkerDead", "QwNoLeadingOrchestrator", "QwTaskFailingRate", "QwGpuMemoryNearFull",
          "QwHostSilent"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no promtool on PATH in CI: .ci/run installs Debian's `prometheus` package, which has it")
        pytest.skip("no promtool (apt-get install prometheus; .ci/run does)")
    return found


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_rules_check():
    checked = run("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


def test_the_scrape_config_checks_with_its_rules_and_targets():
    checked = run("check", "config", MONITORING / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {"qw-hw-metrics", "qw-orchestrator"} <= set(jobs)
    # Every target file's entries name their host, as the stack names it (QW_HOST_LABEL).
    for path in sorted((MONITORING / "targets").glob("*.yml")):
        for group in yaml.safe_load(path.read_text()):
            assert group["targets"] and group["labels"]["host"], f"{path.name}: {group}"


def test_each_alert_has_unit_tests_that_pass():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = [case["alertname"] for test in tests for case in test["alert_rule_test"]]
    firing = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert set(tested) == ALERTS and firing == ALERTS and quiet == ALERTS, "each alert is tested firing and not firing"
    ran = run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def test_a_broken_rule_fails_its_unit_test(tmp_path):
    """The unit tests can fail: a dead-worker rule that counts busy workers fires where it must not."""
    broken = RULES.read_text().replace('qw_cluster_workers{state="dead"}', 'qw_cluster_workers{state="busy"}')
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    ran = run("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert ran.returncode != 0 and "alertname: QwWorkerDead" in ran.stdout + ran.stderr, ran.stdout + ran.stderr
