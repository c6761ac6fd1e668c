"""Face: the seed's `queue_workflows.refs`; the reference mini-language lives in `queue_workflows.dag.refs`."""

from __future__ import annotations

from queue_workflows.dag.refs import MalformedReferenceError, Scope, Unresolved, check, resolve, resolve_inputs, resolve_ref

__all__ = ["MalformedReferenceError", "Scope", "Unresolved", "check", "resolve", "resolve_inputs", "resolve_ref"]
