"""Bulk enqueue for floods of ingest jobs: each item validated as `enqueue_ingest_job` would, then one COPY.

The checks that depend only on an item's task, queue, reason, priority and attempts run once
per distinct combination; only `args` is checked per item. The COPY text is built here from
validated values (names match fixed patterns, JSON and reasons are escaped), which is what
makes this several times cheaper per row than binding parameters one by one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from queue_workflows import config, db
from queue_workflows.common import sqlfile, tracing
from queue_workflows.errors import InvalidPayloadError, QueueWorkflowsError
from queue_workflows.node_queue import _INGEST_ARGS, _bulk_item_params
from queue_workflows.payloads import json_text

_JOBS = sqlfile.load("queue_workflows", "jobs.sql")

_ARGSET = frozenset(_INGEST_ARGS)
_ABSENT = object()  # an omitted argument (its default applies), apart from an explicit None
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def copy_ingest_jobs(jobs: Iterable[Mapping[str, Any]], *, conn: db.Conn | None = None) -> int:
    """`enqueue_ingest_jobs` for floods: the same validation, then one COPY; returns how many were written.

    All or nothing, in the caller's transaction when `conn` is given. No rows come back (use
    `enqueue_ingest_jobs` when the ids are needed); the ready NOTIFY (while a worker waits) fires once per queue at commit.
    """
    try:
        items = list(jobs)
    except TypeError:
        raise InvalidPayloadError(f"jobs must be an iterable of mappings, not {type(jobs).__name__}") from None
    with tracing.enqueue_span("ingest", "*", None, count=len(items)) as span:
        return _copy(items, conn, span.carrier)


def _copy(items: list[Any], conn: db.Conn | None, carrier: Mapping[str, str] | None) -> int:
    max_bytes = config.current().settings.max_payload_bytes
    trace = None if carrier is None else json.dumps(dict(carrier)).translate(_ESCAPES)
    prefixes: dict[tuple[Any, ...], str] = {}
    lines = []
    for index, job in enumerate(items):
        key = _shape(job)
        prefix = prefixes.get(key) if key is not None else None
        if prefix is None:
            params = _bulk_item_params(index, job)  # every check, with the item's label on any error
            prefix = prefixes.setdefault(key, _columns(params, trace)) if key is not None else _columns(params, trace)
            args = params["args"].obj if params["args"] is not None else {}
        else:
            args = job.get("args") or {}
        try:
            text = json_text(args, what="args", max_bytes=max_bytes)
        except QueueWorkflowsError as exc:
            raise type(exc)(f"job #{index}: {exc} [task {job['task_name']!r}]") from None
        lines.append(prefix.replace("\x00ARGS\x00", text.translate(_ESCAPES)))
    if lines:
        statement = _JOBS.sql("copy_ingest_jobs") if trace is None else _JOBS.sql("copy_ingest_jobs_traced")
        with db.transaction(conn) as c, c.cursor() as cur, cur.copy(statement) as copy:
            copy.write("".join(lines))
    return len(lines)


def _shape(job: object) -> tuple[Any, ...] | None:
    """What an item's checks depend on, args aside; None when it is not a well-formed mapping."""
    if not isinstance(job, Mapping) or not job.keys() <= _ARGSET:
        return None
    key = tuple((type(v), v) for v in (job.get(k, _ABSENT) for k in _INGEST_ARGS if k != "args"))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _columns(params: Mapping[str, Any], trace: str | None) -> str:
    """One COPY text line in `_INGEST_ARGS` order, args left as a marker filled per item, then the trace context if any."""
    cells = ["\x00ARGS\x00" if k == "args" else "\\N" if params[k] is None else str(params[k]).translate(_ESCAPES) for k in _INGEST_ARGS]
    if trace is not None:
        cells.append(trace)
    return "\t".join(cells) + "\n"
