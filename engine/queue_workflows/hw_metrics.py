"""Face: the seed's `queue_workflows.hw_metrics`; per-host telemetry lives in `queue_workflows.telemetry`.

    from queue_workflows import hw_metrics
    snapshot = hw_metrics.sample()        # one host snapshot (dict, version 1); no database
    hw_metrics.run(stop_event)            # the sidecar loop: NOTIFY hw_metrics + host_metrics row

The snapshot's shape, what the notification drops past Postgres's 8000-byte limit, and the
Prometheus metric names are in docs/metrics.md. `queue-hw-metrics` runs this as a service, and
`python -m queue_workflows.hw_metrics` is the same command.
"""

from __future__ import annotations

from queue_workflows.telemetry.service import main
from queue_workflows.telemetry.sidecar import Sidecar, registry_for, run, sample
from queue_workflows.telemetry.snapshot import CHANNEL, NOTIFY_LIMIT_BYTES, PAYLOAD_VERSION, for_notify
from queue_workflows.telemetry.state import MetricsState
from queue_workflows.telemetry.store import latest

__all__ = [
    "CHANNEL", "NOTIFY_LIMIT_BYTES", "PAYLOAD_VERSION", "MetricsState", "Sidecar",
    "for_notify", "latest", "main", "registry_for", "run", "sample",
]

if __name__ == "__main__":
    raise SystemExit(main())
