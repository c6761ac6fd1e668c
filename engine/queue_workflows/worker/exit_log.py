"""A worker's record of why it stopped itself: one `qw_worker_exits` row, counted by the cluster metrics by code."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.rows import dict_row

from queue_workflows.common import sqlfile
from queue_workflows.common.text import first_line
from queue_workflows.db_network import network_timeouts

_EXITS = sqlfile.load("queue_workflows.worker", "exit_log.sql")

log = logging.getLogger(__name__)


def record(conn: psycopg.Connection[Any], *, worker_id: str, host_label: str, queue: str, code: int, reason: str, job_id: int | None = None) -> None:
    """Append the exit on `conn` (inside the caller's transaction, beside the trip's own write)."""
    conn.execute(_EXITS["record_exit"], {"worker_id": worker_id, "host_label": host_label, "queue": queue,
                                         "code": code, "job_id": job_id, "reason": reason})


def record_now(url: str, **exit_fields: Any) -> None:
    """Append the exit on a fresh, bounded connection; never raises: a worker on its way out leaves regardless."""
    try:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row, prepare_threshold=None,
                             options="-c statement_timeout=5000", **network_timeouts(url, 5.0)) as conn:
            record(conn, **exit_fields)
    except Exception as exc:  # noqa: BLE001 - leaving anyway
        log.warning("exit %s not recorded: %s", exit_fields.get("code"), first_line(exc))
