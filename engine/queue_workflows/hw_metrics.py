"""Per-host hardware telemetry: sample CPU, RAM, swap, load and GPUs, and publish them to Postgres.

    from queue_workflows import hw_metrics
    snapshot = hw_metrics.sample()        # one host snapshot (dict, version 1); no database
    hw_metrics.run(stop_event)            # the sidecar loop: NOTIFY hw_metrics + host_metrics row

The snapshot's shape, what the notification drops past Postgres's 8000-byte limit, and the
Prometheus metric names are in docs/metrics.md. `queue-hw-metrics` runs this as a service.
"""

from __future__ import annotations

import threading
from typing import Any

from .telemetry.sidecar import Sidecar
from .telemetry.state import MetricsState
from .telemetry.snapshot import NOTIFY_LIMIT_BYTES, PAYLOAD_VERSION, for_notify
from .telemetry.store import latest

CHANNEL = "hw_metrics"

__all__ = [
    "CHANNEL", "NOTIFY_LIMIT_BYTES", "PAYLOAD_VERSION", "MetricsState", "Sidecar",
    "for_notify", "latest", "registry_for", "run", "sample",
]


def sample() -> dict[str, Any]:
    """One snapshot of this host, as the sidecar would publish it."""
    return Sidecar().sample()


def registry_for(state: MetricsState) -> Any:
    """A Prometheus registry serving `state` (needs the `metrics` extra: prometheus_client)."""
    from .telemetry.exposition import registry_for as build

    return build(state)


def run(stop_event: threading.Event) -> None:
    """The sidecar loop in this process, until `stop_event` (no HTTP endpoint: see `queue-hw-metrics`)."""
    Sidecar().run(stop_event)
