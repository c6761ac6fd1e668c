"""The cluster at a glance, for `qw status` and `qw dev`: queue counts, workers, orchestrators, warnings."""

from __future__ import annotations

from typing import Any

from queue_workflows import config, node_queue
from queue_workflows.fair.tenants import tenant_shares
from queue_workflows.ops import admin, flow

ORCHESTRATOR_SILENT_SECONDS = 5.0


def status_data() -> dict[str, Any]:
    """Counts per queue (by family), the age of each queue's oldest queued job, every worker and
    orchestrator, and warnings (fewer orchestrators than QW_EXPECTED_ORCHESTRATORS)."""
    node, ingest = node_queue.snapshot()["queues"], node_queue.ingest_snapshot()["queues"]
    orchestrators = admin.orchestrator_list()
    missing = orchestrators_missing(orchestrators, config.current().settings.expected_orchestrators)
    return {
        "node": node,
        "ingest": ingest,
        "oldest_queued_s": {q: c["oldest_queued_s"] for family in (node, ingest) for q, c in family.items()},
        "workers": admin.worker_list(),
        "orchestrators": orchestrators,
        "warnings": [missing] if missing else [],
        "flow": flow.flow_summary(),  # per limited queue: keys running and at their limit (docs/flow_control.md)
        "tenants": tenant_shares(),  # per queue and tenant: queued, running, served share against the weight's
    }


def orchestrators_missing(orchestrators: list[dict[str, Any]], expected: int) -> str | None:
    """A warning when fewer orchestrators beat than the head runs: without a standby a dead leader is not replaced."""
    live = [o for o in orchestrators if o["role"] != "deposed" and o["silent_seconds"] < ORCHESTRATOR_SILENT_SECONDS]
    if len(live) >= expected:
        return None
    return (f"only {len(live)} of {expected} orchestrators running (QW_EXPECTED_ORCHESTRATORS={expected}): "
            "start the missing ones (docker compose up -d on the head)")
