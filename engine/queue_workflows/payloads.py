"""JSON validation that runs before any write."""

from __future__ import annotations

import json
from typing import Any

from psycopg.types.json import Jsonb

from .errors import InvalidPayloadError


def json_object(value: Any, *, what: str, max_bytes: int, allow_none: bool = False) -> Jsonb | None:
    """Validate `value` as a JSON object within `max_bytes`; returns it ready to bind."""
    if value is None:
        if allow_none:
            return None
        value = {}
    if not isinstance(value, dict):
        raise InvalidPayloadError(f"{what} must be a JSON object (dict), not {type(value).__name__}")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    size = len(text.encode())
    if size > max_bytes:
        raise InvalidPayloadError(f"{what} is {size} bytes, over the {max_bytes}-byte limit (QW_MAX_PAYLOAD_BYTES)")
    if "\\u0000" in text:
        raise InvalidPayloadError(f"{what} contains a NUL character, which Postgres jsonb cannot store")

    def _already_dumped(_obj: Any) -> str:
        return text

    return Jsonb(value, dumps=_already_dumped)
