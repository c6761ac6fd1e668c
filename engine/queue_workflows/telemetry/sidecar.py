"""The hw-metrics loop: sample the host every interval, publish to Postgres, keep Prometheus' view current.

Sampling never depends on the database. Publishing uses one connection of its own, opened
with short timeouts; any database error closes it and the next sample tries a fresh one,
so an outage costs the notifications in between and nothing else: the loop, the host
figures and the /metrics endpoint carry on, and `qw_hw_metrics_database_up` reads 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from queue_workflows import config, db
from queue_workflows.common.health_stamp import HealthStamp
from queue_workflows.common.text import first_line
from queue_workflows.errors import ConfigError
from queue_workflows.node_queue import NODE_QUEUES
from queue_workflows.settings import Settings
from queue_workflows.telemetry import gpus as gpu_sources
from queue_workflows.telemetry import snapshot, store
from queue_workflows.telemetry.attribution import Attribution, attribution_from
from queue_workflows.telemetry.gpu_sample import GpuSample
from queue_workflows.telemetry.host import HostReader
from queue_workflows.telemetry.state import MetricsState

log = logging.getLogger(__name__)

GpuProbe = Callable[[], "list[GpuSample]"]


class Sidecar:
    def __init__(
        self,
        settings: Settings | None = None,
        *,
        database_url: str | None = None,
        gpu_probe: GpuProbe | None = None,
        attribution: Attribution | None = None,
        wall_fn: Callable[[], float] = time.time,
        monotonic_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        cfg = config.current()
        self.settings = settings or cfg.settings
        self._database_url = database_url
        self.host = HostReader()
        timeout = self.settings.gpu_probe_timeout_seconds
        self.gpu_probe = gpu_probe or (lambda: gpu_sources.probe(timeout=timeout))
        self.attribution = attribution or attribution_from(self.settings, cpu_count=self.host.cpu_count())
        self.wall_fn = wall_fn
        self.monotonic_fn = monotonic_fn
        self._queues_due = 0.0
        self.state = MetricsState(host_label=self.settings.host_label)
        self.state.known_queues.update(("node", q) for q in NODE_QUEUES)
        self.state.known_queues.update(("ingest", q) for q in self.settings.ingest_queues)
        self.outcomes = store.OutcomeCounter()
        self._conn: db.Conn | None = None
        self.health = HealthStamp(self.settings.health_file)

    def sample(self) -> dict[str, Any]:
        """One snapshot of this host (version 1, docs/metrics.md); touches no database."""
        figures = self.host.read()
        try:
            devices = self.gpu_probe()
        except Exception:  # noqa: BLE001 - an injected probe's bug must not stop the loop
            log.exception("GPU probe failed: no GPUs in this sample")
            devices = []
        stack = self.attribution.sample(host_cpu_percent=figures.cpu_percent, host_memory_used_bytes=figures.memory_used_bytes)
        return snapshot.build(host_label=self.settings.host_label, sampled_at=self.wall_fn(), host=figures, gpus=devices, stack=stack)

    def step(self) -> dict[str, Any]:
        """Sample, then publish and refresh the queue figures; returns the snapshot."""
        payload = self.sample()
        self.state.update(payload=payload)
        self.publish(payload)
        return payload

    def publish(self, payload: dict[str, Any]) -> bool:
        try:
            conn = self._connection()
            store.publish(conn, payload)
            queues = self._queue_figures(conn)
        except Exception as exc:  # noqa: BLE001 - the sidecar outlives any database trouble
            self._close()
            self._queues_due = 0.0  # back from an outage: read them at once, not stale ones for a while
            with self.state.lock:
                was_up = self.state.database_up
                self.state.database_up = False
                self.state.publish_failures += 1
            if was_up or self.state.publish_failures == 1:
                every = self.settings.hw_metrics_interval_seconds
                cause = db.connect_error(exc, url=self._database_url) if isinstance(exc, psycopg.OperationalError) else None
                if isinstance(cause, ConfigError):  # only a configuration change cures it: say so, as the workers do
                    log.error("%s; still sampling, /metrics still served; retrying every %.1fs", cause, every)
                else:
                    kind = "database unavailable" if isinstance(exc, psycopg.OperationalError) else "publish failed"
                    log.warning("%s (%s): still sampling; retrying every %.1fs", kind, first_line(exc), every)
            return False
        if not self.state.database_up:
            log.info("publishing hw metrics to the database")
        self.health.touch(f"hw-metrics of host {self.settings.host_label} published")
        if queues is None:
            self.state.update(database_up=True)
        else:
            self.state.update(queues=queues, outcomes=dict(self.outcomes.totals), costs=dict(self.outcomes.costs), database_up=True)
        return True

    def _queue_figures(self, conn: db.Conn) -> store.QueueFigures | None:
        """The cluster-wide figures every `metrics_queue_seconds` (0: never); None when not due."""
        every = self.settings.metrics_queue_seconds
        if every <= 0 or self.monotonic_fn() < self._queues_due:
            return None
        figures = store.read_queue_figures(conn, stale_after_seconds=3 * self.settings.heartbeat_seconds)
        self.outcomes.advance(conn)
        self._queues_due = self.monotonic_fn() + every
        return figures

    def _connection(self) -> db.Conn:
        if self._conn is None or self._conn.closed:
            url = self._database_url or config.current().database_url()
            timeout = max(1, int(min(10.0, self.settings.hw_metrics_interval_seconds)))
            self._conn = psycopg.connect(
                url, autocommit=True, row_factory=dict_row, connect_timeout=timeout,
                keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=2,
            )
            store.prepare_session(self._conn, statement_timeout_s=timeout)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001
                pass
        self._conn = None

    def run(self, stop: threading.Event) -> None:
        """Every `hw_metrics_interval_seconds` until `stop`, however long a step took."""
        interval = self.settings.hw_metrics_interval_seconds
        log.info("hw-metrics sampling every %.1fs as host %r", interval, self.settings.host_label)
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - a bug in one sample must not end the sidecar
                    log.exception("hw-metrics sample failed")
                stop.wait(max(0.0, interval - (time.monotonic() - started)))
        finally:
            self._close()


def sample() -> dict[str, Any]:
    """One snapshot of this host, as the sidecar would publish it."""
    return Sidecar().sample()


def run(stop_event: threading.Event) -> None:
    """The sidecar loop in this process, until `stop_event` (no HTTP endpoint: see `queue-hw-metrics`)."""
    Sidecar().run(stop_event)


def registry_for(state: MetricsState) -> Any:
    """A Prometheus registry serving `state` (needs the `metrics` extra: prometheus_client)."""
    from queue_workflows.telemetry.exposition import registry_for as build  # optional dependency

    return build(state)
