"""Text helpers every concern's logs share."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """An error as one log line: its message's first line, or its type when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
