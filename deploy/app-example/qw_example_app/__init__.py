"""An example application for the stack's images: one ingest task, registered at import (QW_APP)."""

from __future__ import annotations

from typing import Any

from queue_workflows import register_ingest_task


def word_count(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Count the words of `text`: what a real task's body would be, in one line."""
    return {"words": len(str(args.get("text", "")).split()), "reason": reason}


register_ingest_task("example.word_count", word_count)
