"""JSON and text validation that runs before any write.

Postgres `text` and `jsonb` cannot hold a NUL, and the driver cannot encode a lone surrogate
(what `surrogateescape` leaves in a non-UTF-8 file name): either one in a write fails the
whole statement, so both are caught here, with the path to the bad value.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg.types.json import Jsonb

from queue_workflows.errors import InvalidPayloadError

MAX_JSON_DEPTH = 100
"""Deepest nesting of objects/arrays accepted in args, inputs, results and a workflow's node inputs/skip_if."""

MAX_NAME_CHARS = 200
"""Longest workflow name, and longest free-text note (reason, requested_by)."""

_PATH_KEY_CHARS = 40


def clean_text(s: str) -> str:
    """`s` made storable: NUL becomes the text `\\x00`, a lone surrogate its backslash escape."""
    if "\x00" in s:
        s = s.replace("\x00", "\\x00")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


def text_problem(s: str) -> str | None:
    """Why `s` cannot be stored (NUL or lone surrogate, with its position), or None."""
    nul = s.find("\x00")
    if nul >= 0:
        return f"a NUL character (\\x00) at position {nul}, which Postgres cannot store"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate ({clean_text(s[exc.start])}) at position {exc.start}, which is not valid UTF-8"
    return None


def shown(value: object, limit: int = 60) -> str:
    """A short, storable repr of a caller's value, for an error message."""
    text = clean_text(repr(value))
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def check_text(value: object, *, what: str, max_chars: int) -> str:
    """A non-empty string of at most `max_chars` that Postgres can store; the error never echoes it."""
    if not isinstance(value, str):
        raise InvalidPayloadError(f"{what} must be a string, not {type(value).__name__}")
    if not 0 < len(value) <= max_chars:
        raise InvalidPayloadError(f"{what} must be 1 to {max_chars} characters, not {len(value)}")
    problem = text_problem(value)
    if problem:
        raise InvalidPayloadError(f"{what} contains {problem}")
    return value


def check_note(value: object, *, what: str, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """An optional note (a reason, a requested_by): None, or text `check_text` accepts."""
    return None if value is None else check_text(value, what=what, max_chars=max_chars)


def check_id(value: object, *, what: str) -> int:
    """A row id: a positive integer a bigint holds (never a bool or a numeric string)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise InvalidPayloadError(f"{what} must be a positive integer, not {shown(value)}")
    return value


_Path = tuple[Any, str | int] | None  # (parent path, key), built into text only for an error


def _path_text(what: str, path: _Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    parts = [what]
    for key in reversed(keys):
        if isinstance(key, int):
            parts.append(f"[{key}]")
        else:  # json.dumps is ASCII-only: a NUL or surrogate in the key shows escaped
            parts.append(f"[{json.dumps(key[:_PATH_KEY_CHARS])}{'...' if len(key) > _PATH_KEY_CHARS else ''}]")
    text = "".join(parts)
    return text if len(text) <= 160 else f"{text[:80]}...{text[-60:]}"


def check_json_tree(value: Any, *, what: str, max_nodes: int) -> None:
    """Walk `value` (iteratively) for what `json.dumps` lets through but Postgres refuses.

    Rejects NUL and lone surrogates in keys and strings, non-string keys, nesting past
    MAX_JSON_DEPTH, and more than `max_nodes` values (each costs at least one byte).
    """
    stack: list[tuple[Any, _Path, int]] = [(value, None, 0)]  # containers only; scalars are checked inline
    nodes = 1
    while stack:
        node, path, depth = stack.pop()
        if depth >= MAX_JSON_DEPTH:
            raise InvalidPayloadError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (the limit) at {_path_text(what, path)}")
        nodes += len(node)
        if nodes > max_nodes:
            raise InvalidPayloadError(f"{what} has more than {max_nodes} values, over the size limit (QW_MAX_PAYLOAD_BYTES)")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        nested: list[tuple[Any, _Path, int]] = []
        for key, child in items:
            if isinstance(node, dict):
                if not isinstance(key, str):
                    raise InvalidPayloadError(f"{_path_text(what, path)} has a key of type {type(key).__name__}; JSON object keys must be strings")
                if _suspect(key) and (problem := text_problem(key)):
                    raise InvalidPayloadError(f"the key {_path_text(what, (path, key))} contains {problem}")
            if isinstance(child, str):
                if _suspect(child) and (problem := text_problem(child)):
                    raise InvalidPayloadError(f"{_path_text(what, (path, key))} contains {problem}")
            elif isinstance(child, (dict, list, tuple)):
                nested.append((child, (path, key), depth + 1))
        stack.extend(reversed(nested))


def _suspect(s: str) -> bool:
    """Cheap pre-check: only a string with a NUL or non-ASCII text can hold either problem."""
    return "\x00" in s or not s.isascii()


def json_text(value: Any, *, what: str, max_bytes: int) -> str:
    """`value` validated as a JSON object within `max_bytes`, as compact JSON text."""
    if not isinstance(value, dict):
        raise InvalidPayloadError(f"{what} must be a JSON object (dict), not {type(value).__name__}")
    check_json_tree(value, what=what, max_nodes=max_bytes)
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"{what} is not JSON-serialisable: {clean_text(str(exc))}") from None
    size = len(text.encode())
    if size > max_bytes:
        raise InvalidPayloadError(f"{what} is {size} bytes, over the {max_bytes}-byte limit (QW_MAX_PAYLOAD_BYTES)")
    return text


def json_object(value: Any, *, what: str, max_bytes: int, allow_none: bool = False) -> Jsonb | None:
    """Validate `value` as a JSON object within `max_bytes`; returns it ready to bind."""
    if value is None:
        if allow_none:
            return None
        value = {}
    text = json_text(value, what=what, max_bytes=max_bytes)

    def _already_dumped(_obj: Any) -> str:
        return text

    return Jsonb(value, dumps=_already_dumped)


def check_vram_gb(value: Any) -> float | None:
    """A gpu job's own working memory in GB (docs/gpu.md, "Several jobs per GPU"); None: none declared."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100_000:
        raise InvalidPayloadError(f"vram_gb must be a number of GB from 0 to 100000, not {shown(value)}")
    return float(value)


def check_gpus(value: Any) -> int:
    """How many devices a gpu job needs at once, on one host."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise InvalidPayloadError(f"gpus must be a whole number of devices from 1 to 64, not {shown(value)}")
    return value
