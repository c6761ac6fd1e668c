"""A task and a DAG node that log (a two-line message with an extra field, a traceback, a warning) for the JSON log test."""

from __future__ import annotations

import logging
from typing import Any

from queue_workflows import register_ingest_task

log = logging.getLogger("qw_log_app")


def _chatter(who: str) -> None:
    log.info("%s says hello\nacross two lines", who, extra={"step": "start"})
    try:
        raise ValueError(f"{who} handled this")
    except ValueError:
        log.exception("%s caught an error", who)
    log.warning("%s is done", who)


def chatty(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    _chatter(f"task {args.get('who', '?')}")
    return {}


def chatty_node(who: str = "node") -> dict[str, Any]:
    _chatter(who)
    return {"who": who}


register_ingest_task("chatty", chatty)
