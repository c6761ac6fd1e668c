"""A node's timeout and retry policy: its stored shape, its validation, and the retry-or-fail decision for one failed attempt.

The policy is a JSON object on the node's row (`retry_policy`, migration 0040) with any of:

- `timeout`: wall-clock seconds one attempt may run; the worker's watchdog ends it as a
  failed attempt raising `NodeTimeout` (which is a `TimeoutError`);
- `retry_backoff`: `{"base": s, "max": s, "jitter": j}`: the delay before retry n is
  `base * 2**(n-1)`, capped at `max`, spread by +/- `jitter` (default 0.2, 0 for none);
- `retry_on` / `no_retry_on`: exception class names. `no_retry_on` is read first: a failure
  it names fails the node at once; then, when `retry_on` is given, only what it names is
  retried. A name matches the raised class or any of its bases (so `OSError` matches
  `FileNotFoundError`); a dotted name (`requests.HTTPError`) also asks that the class live
  in that module or under it (`requests.exceptions.HTTPError` matches).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queue_workflows.common.backoff import retry_delay

KEYS = ("timeout", "retry_backoff", "retry_on", "no_retry_on")
BACKOFF_KEYS = frozenset({"base", "max", "jitter"})
DEFAULT_JITTER = 0.2
MAX_NAMES = 100
_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_BACKOFF_SHAPE = "{'base': seconds, 'max': seconds} (and optionally 'jitter', 0 to below 1)"


class PolicyError(ValueError):
    """A policy value is malformed; the message starts with the key it is about."""


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise PolicyError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


def _backoff(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping) or not {"base", "max"} <= value.keys() or not value.keys() <= BACKOFF_KEYS:
        raise PolicyError(f"retry_backoff must be {_BACKOFF_SHAPE}, not {value!r}")
    base, cap = _seconds(value["base"], "retry_backoff.base"), _seconds(value["max"], "retry_backoff.max")
    if base > cap:
        raise PolicyError(f"retry_backoff.base ({base:g}) must not exceed retry_backoff.max ({cap:g})")
    jitter = value.get("jitter", DEFAULT_JITTER)
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter < 1:
        raise PolicyError(f"retry_backoff.jitter must be a number from 0 to below 1, not {jitter!r}")
    return {"base": base, "max": cap, "jitter": float(jitter)}


def _names(value: Any, key: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise PolicyError(f"{key} must be a non-empty list of exception class names (e.g. ['TimeoutError']), not {value!r}")
    if len(value) > MAX_NAMES:
        raise PolicyError(f"{key} names {len(value)} exceptions; at most {MAX_NAMES}")
    for name in value:
        if not isinstance(name, str) or len(name) > 200 or not _NAME.match(name):
            raise PolicyError(f"{key}: {name!r} is not an exception class name (a name such as 'ValueError' or 'requests.HTTPError')")
    return list(value)


def build(*, timeout: Any = None, retry_backoff: Any = None, retry_on: Any = None, no_retry_on: Any = None) -> dict[str, Any] | None:
    """The policy to store, from the node's keys (None: every key unset); PolicyError names a bad key."""
    policy: dict[str, Any] = {}
    if timeout is not None:
        policy["timeout"] = _seconds(timeout, "timeout")
    if retry_backoff is not None:
        policy["retry_backoff"] = _backoff(retry_backoff)
    if retry_on is not None:
        policy["retry_on"] = _names(retry_on, "retry_on")
    if no_retry_on is not None:
        policy["no_retry_on"] = _names(no_retry_on, "no_retry_on")
    return policy or None


def check(policy: Any) -> dict[str, Any] | None:
    """A whole policy mapping (as `enqueue_node_job(retry_policy=...)` takes it), validated and normalised."""
    if policy is None:
        return None
    if not isinstance(policy, Mapping):
        raise PolicyError(f"retry_policy must be a mapping of {', '.join(KEYS)}, not {type(policy).__name__}")
    unknown = sorted(set(policy) - set(KEYS))
    if unknown:
        raise PolicyError(f"retry_policy has unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(KEYS)})")
    return build(**policy)


def exception_names(exc_type: type[BaseException]) -> tuple[str, ...]:
    """`module:qualname` of the class and each of its bases, most specific first: what the policy matches."""
    return tuple(f"{cls.__module__}:{cls.__qualname__}" for cls in exc_type.__mro__ if cls is not object)


def matching(entry: str, names: Sequence[str]) -> str | None:
    """The first of `names` that `entry` matches (`Name`, `module.Name` or `package.Name`), or None."""
    for name in names:
        module, _, qualname = name.partition(":")
        if entry == qualname:
            return name
        prefix, dot, tail = entry.rpartition(".")
        if dot and tail == qualname.rpartition(".")[2] and (module == prefix or module.startswith(prefix + ".")):
            return name
    return None


@dataclass(frozen=True)
class Decision:
    """What becomes of a failed attempt: retried after `retry_in` seconds, or failed (with `why` when the policy refused)."""

    retry_in: float | None
    why: str | None = None

    def error(self, error: str) -> str:
        """The error to store: a refusal says why first, where a one-line listing shows it."""
        return f"{self.why}\n{error}" if self.why else error


def _shown(names: Sequence[str], entry: str, hit: str) -> str:
    own = names[0].partition(":")[2]
    matched = hit.partition(":")[2]
    return own if matched == own and entry == own else f"{own} (as {entry})"


def decide(
    policy: Mapping[str, Any] | None,
    names: Sequence[str],
    *,
    attempts: int,
    max_attempts: int,
    base: float,
    cap: float,
    random_fn: Callable[[], float] = random.random,
) -> Decision:
    """Retry-or-fail for failed attempt number `attempts` that raised `names` (exception_names; empty: no exception known).

    Without a policy (or for a failure with no exception), every failure is retried while
    attempts remain, with the worker's default backoff `base`/`cap`.
    """
    if attempts >= max_attempts:
        return Decision(None)
    policy = policy or {}
    if names:
        for entry in policy.get("no_retry_on") or ():
            if (hit := matching(entry, names)) is not None:
                return Decision(None, f"no retry: {_shown(names, entry, hit)} is in no_retry_on")
        retry_on = policy.get("retry_on")
        if retry_on and not any(matching(entry, names) is not None for entry in retry_on):
            return Decision(None, f"no retry: {names[0].partition(':')[2]} is not in retry_on {list(retry_on)}")
    backoff = policy.get("retry_backoff")
    if backoff:
        delay = retry_delay(attempts, base=backoff["base"], cap=backoff["max"], jitter=backoff.get("jitter", DEFAULT_JITTER), random_fn=random_fn)
    else:
        delay = retry_delay(attempts, base=base, cap=cap, random_fn=random_fn)
    return Decision(delay)


def timeout_of(policy: Mapping[str, Any] | None) -> float | None:
    value = (policy or {}).get("timeout")
    return float(value) if value else None
