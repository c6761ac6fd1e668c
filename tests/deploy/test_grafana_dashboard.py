"""The `grafana` profile's provisioning files (Grafana has no Debian package, so no Grafana runs
here): the datasource and dashboard provider parse with the fields Grafana requires, every panel
names a provisioned datasource, and every metric a panel or an alert rule reads is one the services
really export. The sidecar's names come from a real scrape of its exposition, in process, against
a test database, and the leading orchestrator's from one real sample of its cluster exporter against
the same database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from promql_names import DASHBOARDS, MONITORING, ROOT, metric_names, missing, panels, used_names

import queue_workflows
from queue_workflows import hw_metrics, node_queue, tasks
from queue_workflows.leader.cluster_exposition import registry_for as cluster_registry_for
from queue_workflows.leader.cluster_metrics import ClusterMetrics
from queue_workflows.telemetry.gpu_sample import GpuSample

PROVISIONING = MONITORING / "grafana" / "provisioning"
COMPOSE = ROOT / "deploy" / "compose.monitoring.yaml"
def exposition_names(text: str) -> set[str]:
    """Every family and sample name an exposition carries, a family without samples included (Prometheus keeps its metadata)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names |= {f"{family.name}_total"} if family.type == "counter" else set()
        names |= {sample.name for sample in family.samples}
    return names


@pytest.fixture
def sidecar_names(database_url, tmp_path) -> set[str]:
    """One real step of the sidecar against the test database (a queued job per family, one GPU), then its /metrics text."""
    queue_workflows.configure(database_url=database_url, host_label="dash-1", cgroup_root=tmp_path / "no-cgroup",
                              docker_url=f"unix://{tmp_path}/no-docker.sock", metrics_queue_seconds=0.1)
    tasks.register_ingest_task("noop", lambda reason: {})
    node_queue.enqueue_ingest_job("noop", "fetch")
    node_queue.enqueue_node_job("square", "cpu", node_module="qw_demo.square", inputs={"x": 2})
    gpu = GpuSample(index=0, name="Fake GPU", uuid="GPU-fake", source="nvml", util_percent=40.0, memory_used_bytes=1 << 30,
                    memory_total_bytes=8 << 30, temperature_c=50.0, power_w=90.0)
    sidecar = hw_metrics.Sidecar(gpu_probe=lambda: [gpu])
    sidecar.step()
    text = generate_latest(hw_metrics.registry_for(sidecar.state)).decode()
    assert 'qw_queue_jobs{family="ingest",queue="fetch",status="queued"} 1.0' in text, text
    assert 'qw_gpu_memory_total_bytes{gpu="0",host="dash-1"}' in text, text
    return exposition_names(text)


@pytest.fixture
def orchestrator_names(sidecar_names, database_url, conn) -> set[str]:
    """One real sample of the leading orchestrator's cluster exporter on the same database (its jobs included), then its /metrics text."""
    metrics = ClusterMetrics(interval=1.0, max_tasks=200, stale_after_seconds=30.0, url=database_url)
    metrics.took_office(1)
    metrics.sample(conn)
    text = generate_latest(cluster_registry_for(metrics)).decode()
    assert "qw_cluster_is_leader 1.0" in text, text
    return exposition_names(text)


def datasource_uids() -> set[str]:
    [path] = sorted((PROVISIONING / "datasources").glob("*.yml"))
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == 1
    for source in config["datasources"]:
        missing_fields = {"name", "type", "uid", "access", "url"} - set(source)
        assert not missing_fields, f"{path.name}: datasource {source.get('name')} lacks {sorted(missing_fields)}"
        assert source["access"] in ("proxy", "direct")
    [prometheus] = [s for s in config["datasources"] if s["type"] == "prometheus"]
    assert prometheus["url"] == "http://prometheus:9090", "the monitoring profile's Prometheus, on the compose network"
    return {s["uid"] for s in config["datasources"]}


def test_the_datasource_and_dashboard_provider_have_what_grafana_requires():
    assert datasource_uids() == {"qw-prometheus"}
    [path] = sorted((PROVISIONING / "dashboards").glob("*.yml"))
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == 1
    [provider] = config["providers"]
    assert provider["name"] and provider["type"] == "file" and provider["options"]["path"]
    # The provider reads the directory compose mounts the dashboards at, and the provisioning is mounted where Grafana looks.
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert mounts[provider["options"]["path"]] == "./deploy/monitoring/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/monitoring/grafana/provisioning"


def test_every_panel_names_a_provisioned_datasource_and_has_a_place():
    uids = datasource_uids()
    assert DASHBOARDS, "no dashboard JSON in deploy/monitoring/grafana/dashboards"
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{path.name}: panel ids repeat"
        for panel in panels(dashboard):
            assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] in uids, f"{path.name}: panel {panel['title']!r} names datasource {panel['datasource']}"
            assert panel["targets"], f"{path.name}: panel {panel['title']!r} has no query"
            for target in panel["targets"]:
                assert target.get("datasource", panel["datasource"])["uid"] in uids, f"{panel['title']!r} ({target['refId']})"
                assert target["expr"].strip() and metric_names(target["expr"]), f"{panel['title']!r} ({target['refId']}) reads no metric"


def test_the_dashboard_covers_what_an_operator_watches():
    titles = {p["title"] for path in DASHBOARDS for p in panels(json.loads(path.read_text())) if p["type"] == "row"}
    assert titles == {"Hosts", "GPUs", "Queues", "Throughput", "Latency", "Failures", "Workers", "Model loads"}


def test_every_metric_the_dashboard_and_the_alerts_read_is_exported(sidecar_names, orchestrator_names):
    used = used_names()
    assert any(name.startswith("qw_queue_") for name in used) and any(name.startswith("qw_cluster_") for name in used)
    absent = missing(used, sidecar_names | orchestrator_names)
    assert absent == {}, f"read by a panel or an alert, exported by no service: {absent}"


def test_a_misspelt_metric_in_a_panel_is_caught(sidecar_names, orchestrator_names, tmp_path, monkeypatch):
    """The check can fail: one panel's query with a metric name the sidecar does not export."""
    import promql_names

    [path] = DASHBOARDS
    dashboard = json.loads(path.read_text())
    panel = next(p for p in panels(dashboard) if p.get("title") == "Host CPU")
    panel["targets"][0]["expr"] = "qw_host_cpu_percnt"
    broken = tmp_path / path.name
    broken.write_text(json.dumps(dashboard))
    monkeypatch.setattr(promql_names, "DASHBOARDS", [broken])
    absent = missing(promql_names.used_names(), sidecar_names | orchestrator_names)
    assert absent == {"qw_host_cpu_percnt": [f"{path.name}: Host CPU (A)"]}, absent
    assert "qw_host_cpu_percnt" not in path.read_text()  # the shipped file is untouched


def test_the_tokenizer_skips_what_is_not_a_metric():
    expr = ('histogram_quantile(0.95, sum by (queue, le) (rate(a_bucket{queue=~"gpu|cpu", le!="+Inf"}[5m]))) > 2'
            ' and on (queue) group_left(host) b offset 1h unless ignoring(x) max without (y) (c[10m:1m]) or absent(d) + e @ start()'
            ' * count_values("value", f) / $__rate_interval')
    assert metric_names(expr) == {"a_bucket", "b", "c", "d", "e", "f"}
    with pytest.raises(ValueError, match=r"histogram_quantil\(\.\.\.\) .* is no PromQL function"):
        metric_names("histogram_quantil(0.9, rate(x[5m]))")


def test_compose_mounts_are_the_files_the_tests_read():
    prometheus = yaml.safe_load(COMPOSE.read_text())["services"]["prometheus"]
    mounts = {volume.split(":")[0]: volume.split(":")[1] for volume in prometheus["volumes"]}
    assert mounts["./deploy/monitoring/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert mounts["./deploy/monitoring/rules"] == "/etc/prometheus/rules"
    assert mounts["./deploy/monitoring/targets"] == "/etc/prometheus/targets"
    assert Path(ROOT / "deploy" / "monitoring" / "rules" / "queue-workflows.yml").is_file()
