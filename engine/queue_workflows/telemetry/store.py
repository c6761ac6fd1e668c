"""The sidecar's database side: publish a snapshot, and read the queue figures Prometheus shows.

Publishing is one transaction: the host_metrics upsert and the NOTIFY commit together, so
a listener that sees the notification can also read the row. The queue figures are
cluster-wide (any sidecar reports the same), read with one statement per table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.telemetry import snapshot

_TELEMETRY = sqlfile.load("queue_workflows.telemetry", "telemetry.sql")

FAMILIES = (("node", "workflow_node_jobs"), ("ingest", "ingest_jobs"))
MODEL_COLUMNS = ("loaded_models", "warm_models", "models", "current_model")  # the first a heartbeat row has
MAX_MODELS_PER_WORKER = 64
OUTCOME_LAG_SECONDS = 5.0


def prepare_session(conn: db.Conn, *, statement_timeout_s: float) -> None:
    conn.execute(_TELEMETRY.sql("telemetry_session"), {"statement_timeout_ms": str(max(1, int(statement_timeout_s * 1000)))})


def publish(conn: db.Conn, payload: dict[str, Any]) -> str:
    """Upsert the host's row with the full snapshot and NOTIFY the (possibly trimmed) one; returns what was sent."""
    message = snapshot.for_notify(payload)
    with conn.transaction():
        conn.execute(_TELEMETRY.sql("host_metrics_upsert"), {
            "host_label": payload["host"], "payload_version": payload["v"],
            "payload": snapshot.encode(payload), "sampled_at": payload["ts"],
        })
        conn.execute(_TELEMETRY.sql("host_metrics_notify"), {"payload": message})
    return message


def latest(conn: db.Conn) -> list[dict[str, Any]]:
    """Every host's last snapshot, for a late joiner."""
    return conn.execute(_TELEMETRY.sql("host_metrics_latest")).fetchall()


@dataclass(frozen=True)
class QueueFigures:
    jobs: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (family, queue, status) -> jobs
    oldest_queued_s: dict[tuple[str, str], float] = field(default_factory=dict)  # (family, queue)
    live_workers: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, queue)
    warm_models: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (host, queue, model) -> workers


def read_queue_figures(conn: db.Conn, *, stale_after_seconds: float) -> QueueFigures:
    figures = QueueFigures()
    for family, table in FAMILIES:
        for row in conn.execute(_TELEMETRY.sql("metrics_queue_depth", table)):
            figures.jobs[(family, row["queue"], row["status"])] = row["n"]
            if row["oldest_s"] is not None:
                figures.oldest_queued_s[(family, row["queue"])] = max(0.0, row["oldest_s"])
    for row in conn.execute(_TELEMETRY.sql("metrics_live_workers"), {"stale_after_seconds": stale_after_seconds}):
        key = (row["host_label"], row["queue"])
        figures.live_workers[key] = figures.live_workers.get(key, 0) + 1
        for model in loaded_models(row["row"]):
            mkey = (*key, model)
            figures.warm_models[mkey] = figures.warm_models.get(mkey, 0) + 1
    return figures


def loaded_models(row: Any) -> list[str]:
    """The models a heartbeat row says its worker holds, whatever shape the column has; [] when it has none."""
    if not isinstance(row, dict):
        return []
    value = next((row[c] for c in MODEL_COLUMNS if row.get(c) not in (None, [], {}, "")), None)
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, dict):
        items = list(value)
    elif isinstance(value, list):
        items = value
    else:
        return []
    models = []
    for item in items[:MAX_MODELS_PER_WORKER]:
        if isinstance(item, dict):
            item = next((item[k] for k in ("id", "model", "model_id", "name") if isinstance(item.get(k), str)), None)
        if isinstance(item, str) and item.strip():
            models.append(item.strip()[: snapshot.MAX_TEXT])
    return sorted(set(models))


COSTS = ("cpu_seconds", "wall_seconds", "model_loads", "model_load_seconds")


class OutcomeCounter:
    """Counts jobs finishing from now on, by (family, queue, outcome), from a moving window of finished_at.

    The window ends OUTCOME_LAG_SECONDS ago by the database's clock, so a job whose finishing
    transaction is still committing is counted next time rather than never.
    """

    def __init__(self, lag_seconds: float = OUTCOME_LAG_SECONDS) -> None:
        self.lag_seconds = lag_seconds
        self.totals: dict[tuple[str, str, str], int] = {}
        self.costs: dict[tuple[str, str, str], float] = {}  # (family, queue, cost) -> running sum
        self._since: float | None = None

    def advance(self, conn: db.Conn) -> None:
        row = conn.execute(_TELEMETRY.sql("metrics_db_now"), {"lag_seconds": self.lag_seconds}).fetchone()
        until = float(row["until"]) if row else 0.0
        if self._since is None:  # start counting now: jobs finished before the sidecar are not its to count
            self._since = until
            return
        if until <= self._since:
            return
        counted: list[tuple[tuple[str, str, str], int]] = []
        spent: list[tuple[tuple[str, str, str], float]] = []
        with conn.transaction():
            for family, table in FAMILIES:
                for r in conn.execute(_TELEMETRY.sql("metrics_finished_between", f"{table}_all"), {"since": self._since, "until": until}):
                    counted.append(((family, r["queue"], r["status"]), r["n"]))
                    spent.extend(((family, r["queue"], cost), float(r[cost])) for cost in COSTS)
        for key, n in counted:  # only once every table was read: a failure mid-way counts nothing twice
            self.totals[key] = self.totals.get(key, 0) + n
        for cost_key, amount in spent:
            self.costs[cost_key] = self.costs.get(cost_key, 0.0) + amount
        self._since = until
