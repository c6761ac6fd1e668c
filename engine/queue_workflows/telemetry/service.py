"""The hw-metrics sidecar as a command (`queue-hw-metrics`, `python -m queue_workflows.hw_metrics`), with its Prometheus endpoint.

Every flag has a QW_ setting behind it (docs/metrics.md); a flag wins over the environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from queue_workflows import app_loader, config
from queue_workflows.errors import ConfigError
from queue_workflows.telemetry.sidecar import Sidecar, registry_for, sample

__all__ = ["build_parser", "health", "main"]

LAST_SAMPLE = "qw_hw_metrics_last_sample_timestamp_seconds"
log = logging.getLogger(__name__)

FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--interval", "hw_metrics_interval_seconds", float, "seconds between samples (QW_HW_METRICS_INTERVAL_SECONDS, default 5)"),
    ("--port", "metrics_port", int, "Prometheus port, 0 for none (QW_METRICS_PORT, default 9464)"),
    ("--addr", "metrics_addr", str, "address the endpoint listens on (QW_METRICS_ADDR, default 0.0.0.0)"),
    ("--queue-seconds", "metrics_queue_seconds", float, "how often to read the cluster's queue, worker and model figures, 0 for never (QW_METRICS_QUEUE_SECONDS, default 15)"),
    ("--host-label", "host_label", str, "this host's name in metrics and host_metrics (QW_HOST_LABEL, default: hostname)"),
    ("--cgroup-root", "cgroup_root", Path, "the host's cgroup tree, mounted read-only (QW_CGROUP_ROOT, default /sys/fs/cgroup)"),
    ("--docker-url", "docker_url", str, "Docker API URL (QW_DOCKER_URL, default: DOCKER_HOST or the local socket)"),
    ("--compose-project", "compose_project", str, "the stack's compose project (QW_COMPOSE_PROJECT, default: the sidecar's own)"),
    ("--container-prefix", "container_prefix", str, "or select the stack's containers by name prefix (QW_CONTAINER_PREFIX)"),
    ("--gpu-timeout", "gpu_probe_timeout_seconds", float, "seconds each GPU tool may take (QW_GPU_PROBE_TIMEOUT_SECONDS, default 2)"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queue-hw-metrics",
        description="Sample this host's CPU/RAM/swap/load and GPUs, attribute CPU/RAM to the stack's containers, "
        "NOTIFY hw_metrics and upsert host_metrics every interval, and serve Prometheus /metrics.",
        epilog="Database: QW_DATABASE_URL. Outages are ridden out: sampling and /metrics carry on.",
    )
    parser.add_argument("--app", default=None, help="module imported first; its configure() applies (default: QW_APP)")
    parser.add_argument("--once", action="store_true", help="print one snapshot as JSON and exit (no database)")
    parser.add_argument("--health", action="store_true",
                        help="exit 0 if the sidecar on --port (this host) sampled within 3 intervals, else 1 (a container HEALTHCHECK)")
    for flag, _, kind, text in FLAGS:
        parser.add_argument(flag, type=kind, default=None, help=text)
    return parser


def _apply(args: argparse.Namespace) -> None:
    overrides = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field, _, _ in FLAGS}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if overrides:
        current = config.current()
        config.configure(db_url_env=current.db_url_env, **{**current.settings.model_dump(), **overrides})


def _need_prometheus() -> None:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError("queue-hw-metrics needs prometheus_client: install the metrics extra, queue-workflows[metrics]") from None


def serve(stop: threading.Event) -> int:
    settings = config.current().settings
    sidecar = Sidecar(settings)
    server = None
    if settings.metrics_port:
        _need_prometheus()
        from prometheus_client import start_http_server

        try:
            server, _ = start_http_server(settings.metrics_port, settings.metrics_addr, registry=registry_for(sidecar.state))
        except OSError as exc:
            raise ConfigError(f"QW_METRICS_PORT/--port: cannot listen on {settings.metrics_addr}:{settings.metrics_port} ({exc})") from None
        log.info("serving Prometheus metrics on http://%s:%d/metrics", settings.metrics_addr, settings.metrics_port)
    try:
        sidecar.run(stop)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return 0


def health() -> int:
    """Ask the running sidecar's /metrics how old its latest sample is; 0 when fresh."""
    _need_prometheus()
    from prometheus_client.parser import text_string_to_metric_families

    settings = config.current().settings
    if not settings.metrics_port:
        print("unhealthy: QW_METRICS_PORT is 0, there is no endpoint to ask", file=sys.stderr)
        return 1
    url = f"http://127.0.0.1:{settings.metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    stamps = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == LAST_SAMPLE]
    age = time.time() - max(stamps) if stamps else float("inf")
    if age > 3 * settings.hw_metrics_interval_seconds:
        print(f"unhealthy: the latest sample is {age:.0f}s old", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    app_loader.ensure_logging()  # no-op under queue-hw-metrics, which names its process in the log first

    def _body() -> int:
        app_loader.load_app(args.app, need_database=False)
        _apply(args)
        if args.health:
            return health()
        if args.once:
            print(json.dumps(sample(), indent=2))
            return 0
        config.current().database_url()
        stop = threading.Event()
        app_loader.on_stop_signals(stop.set)
        return serve(stop)

    return app_loader.run_tool(_body)


if __name__ == "__main__":
    raise SystemExit(main())
