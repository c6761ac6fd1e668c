"""A workflow definition: the Python builder and the data form (dict / JSON / YAML), one shape.

Data form::

    {"name": "ingest",
     "nodes": [
        {"id": "fetch", "call": "myapp.nodes.fetch", "queue": "cpu", "inputs": {"url": {"$from": "url"}}},
        {"id": "embed", "call": "myapp.nodes.embed:run", "queue": "gpu", "model": "bge-small",
         "deps": ["fetch"], "inputs": {"text": {"$from": "fetch.text"}},
         "skip_if": {"$eq": [{"$from": "fetch.text", "default": ""}, ""]},
         "max_attempts": 5, "budget_seconds": 600,
         "timeout": 120, "retry_backoff": {"base": 5, "max": 60}, "no_retry_on": ["ValueError"]}]}

`call` names a module exposing `run(...)` ("pkg.mod") or a function ("pkg.mod:func"); the
builder also takes the function itself. `module` is accepted as an alias of `call` (the seed's
`node_module`). Nothing here checks the definition: `validate.validate` does, before any write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_workflows import callables
from queue_workflows.errors import InvalidPayloadError, QueueWorkflowsError
from queue_workflows.payloads import MAX_NAME_CHARS, check_text


class WorkflowValidationError(QueueWorkflowsError, ValueError):
    """The workflow definition is invalid; the message names the node (and the cycle, for a cycle)."""


def check_workflow_name(name: object) -> str:
    """A workflow's name: 1 to MAX_NAME_CHARS characters Postgres can store (never echoed back)."""
    try:
        return check_text(name, what="workflow name", max_chars=MAX_NAME_CHARS)
    except InvalidPayloadError as exc:
        raise WorkflowValidationError(f"workflow: {exc}") from None

POLICY_KEYS = ("timeout", "retry_backoff", "retry_on", "no_retry_on")  # a node's own timeout and retry policy (common/retry_policy.py)
# A sleep's or an event wait's own keys (dag/timers.py); on a wait_event `timeout` is how long it waits.
TIMER_KEYS = ("for", "until", "key", "timeout", "default")
MAP_KEYS = frozenset({"over", "item_input", "max_parallel", "allow_failures"})  # only a "map" node takes these (dag/map.py)
NODE_KEYS = frozenset({"id", "call", "module", "queue", "model", "deps", "inputs", "skip_if", "max_attempts", "budget_seconds", "kind",
                       "workflow", "concurrency_key", "gpus", "vram_gb", *POLICY_KEYS, *TIMER_KEYS})
TIMER_KINDS = ("sleep", "wait_event")  # held 'waiting' by the orchestrator's timekeeper, no worker
# An "input" node runs nothing: it waits for a submitted value (awaiting_input); a "workflow" node
# starts a child run of `workflow` (a name for the provider, or a definition) and waits for it
# (dag/child.py); a "map" node runs `call` once per item of `over` (dag/map.py).
KINDS = ("task", "input", "workflow", "map", *TIMER_KINDS)


def callable_spec(call: Any) -> Any:
    """A function (registered, callables.py) or module becomes its import string; anything else is kept for validate to judge."""
    if isinstance(call, str) or call is None:
        return call
    module = getattr(call, "__module__", None)
    qualname = getattr(call, "__qualname__", None)
    if callable(call) and isinstance(module, str) and isinstance(qualname, str):
        callables.remember(call)  # code handing over a function chose it: this process may run it
        return f"{module}:{qualname}"
    name = getattr(call, "__name__", None)
    if isinstance(name, str) and hasattr(call, "__file__"):  # a module object
        return name
    return call


@dataclass(frozen=True)
class Node:
    id: Any
    call: Any
    queue: Any = "cpu"
    model: Any = None
    deps: tuple[Any, ...] = ()
    inputs: Any = field(default_factory=dict)
    skip_if: Any = None
    max_attempts: Any = 3
    budget_seconds: Any = None
    kind: Any = "task"
    timeout: Any = None
    retry_backoff: Any = None
    retry_on: Any = None
    no_retry_on: Any = None
    workflow: Any = None  # a "workflow" node's child: a name or a definition
    timer: Any = field(default_factory=dict)  # the TIMER_KEYS given to a sleep or wait_event node
    over: Any = None
    item_input: Any = "item"
    max_parallel: Any = None
    allow_failures: Any = False
    concurrency_key: Any = None  # its job's key under a flow limit (docs/flow_control.md)
    gpus: Any = 1  # a gpu node's devices at once, and its own VRAM beyond its model's (docs/gpu.md, "Several jobs per GPU")
    vram_gb: Any = None

    @property
    def is_input(self) -> bool:
        return self.kind == "input"

    @property
    def is_child(self) -> bool:
        return self.kind == "workflow"

    @property
    def is_timer(self) -> bool:
        return self.kind in TIMER_KINDS

    @property
    def runs_code(self) -> bool:
        return self.kind not in ("input", "workflow", *TIMER_KINDS)

    @property
    def is_map(self) -> bool:
        return self.kind == "map"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "call": self.call, "queue": self.queue, "deps": list(self.deps), "inputs": self.inputs}
        if self.model is not None:
            data["model"] = self.model
        if self.skip_if is not None:
            data["skip_if"] = self.skip_if
        data["max_attempts"] = self.max_attempts
        if self.budget_seconds is not None:
            data["budget_seconds"] = self.budget_seconds
        if self.gpus != 1:
            data["gpus"] = self.gpus
        if self.vram_gb is not None:
            data["vram_gb"] = self.vram_gb
        if self.kind != "task":
            data["kind"] = self.kind
        data.update((key, getattr(self, key)) for key in POLICY_KEYS if getattr(self, key) is not None)
        if self.workflow is not None:
            data["workflow"] = self.workflow
        data.update(self.timer)
        if self.is_map:
            data.update(over=self.over, item_input=self.item_input, max_parallel=self.max_parallel, allow_failures=self.allow_failures)
        if self.concurrency_key is not None:
            data["concurrency_key"] = self.concurrency_key
        return data


class Workflow:
    """An ordered set of nodes; `node(...)` returns the workflow so calls chain."""

    def __init__(self, name: str, nodes: Iterable[Node] = ()) -> None:
        self.name = name
        self.nodes: list[Node] = list(nodes)

    def node(
        self,
        id: str,  # noqa: A002 - the public keyword, as workflow files name it
        call: str | Callable[..., Any] | None = None,
        *,
        queue: str = "cpu",
        model: str | None = None,
        deps: Iterable[str] = (),
        inputs: Mapping[str, Any] | None = None,
        skip_if: Any = None,
        max_attempts: int = 3,
        budget_seconds: float | None = None,
        input: bool = False,  # noqa: A002 - the public keyword, as workflow files name it
        timeout: float | None = None,
        retry_backoff: Mapping[str, float] | None = None,
        retry_on: Iterable[str] | None = None,
        no_retry_on: Iterable[str] | None = None,
        concurrency_key: str | None = None,
        gpus: int = 1,
        vram_gb: float | None = None,
    ) -> Workflow:
        """Add a node; `input=True` makes it an input step (no `call`: it waits for `submit_input`).

        `timeout`, `retry_backoff`, `retry_on`, `no_retry_on`: its own timeout and retry policy (docs/dag.md).
        """
        deps_tuple = (deps,) if isinstance(deps, str) else tuple(deps)
        self.nodes.append(
            Node(id, callable_spec(call), queue, model, deps_tuple, dict(inputs or {}), skip_if, max_attempts, budget_seconds,
                 "input" if input is True else "task" if input is False else input, timeout=timeout, retry_backoff=retry_backoff,
                 retry_on=_listed(retry_on), no_retry_on=_listed(no_retry_on), concurrency_key=concurrency_key, gpus=gpus, vram_gb=vram_gb)
        )
        return self

    def child(
        self,
        id: str,  # noqa: A002 - the public keyword, as workflow files name it
        workflow: str | Workflow | Mapping[str, Any],
        *,
        inputs: Mapping[str, Any] | None = None,
        deps: Iterable[str] = (),
        skip_if: Any = None,
    ) -> Workflow:
        """Add a child-workflow node: it starts a run of `workflow` (a provider's name, or a definition)
        with its resolved `inputs` as context, and completes with that run's output (dag/child.py)."""
        deps_tuple = (deps,) if isinstance(deps, str) else tuple(deps)
        child = workflow.to_dict() if isinstance(workflow, Workflow) else workflow
        self.nodes.append(Node(id, None, deps=deps_tuple, inputs=dict(inputs or {}), skip_if=skip_if, max_attempts=1,
                               kind="workflow", workflow=child))
        return self

    def sleep(self, id: str, *, seconds: Any = None, until: Any = None, deps: Iterable[str] = (),  # noqa: A002
              skip_if: Any = None) -> Workflow:
        """A node that completes `seconds` after it is reached, or at `until` (ISO 8601); no worker is held."""
        given = {"for": seconds, "until": until}
        return self._timer(id, "sleep", {k: v for k, v in given.items() if v is not None}, deps, skip_if)

    def wait_event(self, id: str, *, key: Any, timeout: Any = None, default: Any = None, deps: Iterable[str] = (),  # noqa: A002
                   skip_if: Any = None) -> Workflow:
        """A node that completes with the payload of the first event sent to `key` (`send_event`).

        After `timeout` seconds it completes with `default` (a JSON object) or, without one, fails.
        """
        given = {"key": key, "timeout": timeout, "default": default}
        return self._timer(id, "wait_event", {k: v for k, v in given.items() if v is not None}, deps, skip_if)

    def _timer(self, id: str, kind: str, timer: dict[str, Any], deps: Iterable[str], skip_if: Any) -> Workflow:  # noqa: A002
        deps_tuple = (deps,) if isinstance(deps, str) else tuple(deps)
        self.nodes.append(Node(id, None, deps=deps_tuple, skip_if=skip_if, kind=kind, timer=timer))
        return self

    def map(
        self,
        id: str,  # noqa: A002 - the public keyword, as workflow files name it
        call: str | Callable[..., Any],
        *,
        over: Any,
        item_input: str = "item",
        max_parallel: int | None = None,
        allow_failures: bool = False,
        queue: str = "cpu",
        model: str | None = None,
        deps: Iterable[str] = (),
        inputs: Mapping[str, Any] | None = None,
        skip_if: Any = None,
        max_attempts: int = 3,
        budget_seconds: float | None = None,
        timeout: float | None = None,
        retry_backoff: Mapping[str, Any] | None = None,
        retry_on: Iterable[str] | None = None,
        no_retry_on: Iterable[str] | None = None,
        concurrency_key: str | None = None,
        gpus: int = 1,
        vram_gb: float | None = None,
    ) -> Workflow:
        """Add a map node: `call` runs once per item of `over` (a list or a `$from` reference), the item as `item_input`.

        `max_attempts`, `budget_seconds` and the retry policy are per item; the node's output is `{"items": [...]}` in item order.
        """
        deps_tuple = (deps,) if isinstance(deps, str) else tuple(deps)
        self.nodes.append(
            Node(id, callable_spec(call), queue, model, deps_tuple, dict(inputs or {}), skip_if, max_attempts, budget_seconds,
                 "map", timeout, retry_backoff, _listed(retry_on), _listed(no_retry_on),
                 over=over, item_input=item_input, max_parallel=max_parallel, allow_failures=allow_failures,
                 concurrency_key=concurrency_key, gpus=gpus, vram_gb=vram_gb)
        )
        return self

    def by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workflow:
        if not isinstance(data, Mapping):
            raise WorkflowValidationError(f"a workflow must be a mapping with 'name' and 'nodes', not {type(data).__name__}")
        name = check_workflow_name(data.get("name"))  # before any message quotes it
        raw_nodes = data.get("nodes")
        if not isinstance(raw_nodes, list):
            raise WorkflowValidationError(f"workflow {name!r}: 'nodes' must be a list, not {type(raw_nodes).__name__}")
        nodes = []
        for index, raw in enumerate(raw_nodes):
            if not isinstance(raw, Mapping):
                raise WorkflowValidationError(f"workflow {name!r}: node #{index} must be a mapping, not {type(raw).__name__}")
            unknown = sorted(set(raw) - NODE_KEYS - (MAP_KEYS if raw.get("kind") == "map" else frozenset()))
            label = raw.get("id", f"#{index}")
            if unknown and set(unknown) <= MAP_KEYS:
                raise WorkflowValidationError(f"workflow {name!r}: node {label!r}: {', '.join(unknown)} only apply to a map node (\"kind\": \"map\")")
            if unknown:
                raise WorkflowValidationError(f"workflow {name!r}: node {label!r} has unknown key(s) {', '.join(unknown)}")
            if "call" in raw and "module" in raw:
                raise WorkflowValidationError(f"workflow {name!r}: node {label!r} gives both 'call' and 'module'")
            deps = raw.get("deps", ())
            nodes.append(
                Node(
                    id=raw.get("id"),
                    call=callable_spec(raw.get("call", raw.get("module"))),
                    queue=raw.get("queue", "cpu"),
                    model=raw.get("model"),
                    deps=(deps,) if isinstance(deps, str) else tuple(deps) if isinstance(deps, (list, tuple)) else (deps,),
                    inputs=raw.get("inputs", {}),
                    skip_if=raw.get("skip_if"),
                    max_attempts=raw.get("max_attempts", 3),
                    budget_seconds=raw.get("budget_seconds"),
                    kind=raw.get("kind", "task"),
                    **{key: raw.get(key) for key in POLICY_KEYS if not (key == "timeout" and raw.get("kind") in TIMER_KINDS)},
                    workflow=raw.get("workflow"),
                    timer={k: raw[k] for k in TIMER_KEYS if k in raw and (k != "timeout" or raw.get("kind") in TIMER_KINDS)},
                    over=raw.get("over"),
                    item_input=raw.get("item_input", "item"),
                    max_parallel=raw.get("max_parallel"),
                    allow_failures=raw.get("allow_failures", False),
                    concurrency_key=raw.get("concurrency_key"),
                    gpus=raw.get("gpus", 1),
                    vram_gb=raw.get("vram_gb"),
                )
            )
        return cls(name, nodes)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> Workflow:
        return cls.from_dict(json.loads(_text(text_or_path)))

    @classmethod
    def from_yaml(cls, text_or_path: str | Path) -> Workflow:
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - pyyaml is optional
            raise ImportError("Workflow.from_yaml needs PyYAML (pip install pyyaml)") from exc
        return cls.from_dict(yaml.safe_load(_text(text_or_path)))

    @classmethod
    def load(cls, path: str | Path) -> Workflow:
        """A `.json`, `.yaml` or `.yml` file."""
        suffix = Path(path).suffix.lower()
        return cls.from_yaml(Path(path)) if suffix in (".yaml", ".yml") else cls.from_json(Path(path))


def _listed(names: Any) -> Any:
    """A tuple or set of names as a list (what the data form holds); a string or anything else is kept for validate to refuse."""
    return list(names) if isinstance(names, (tuple, set, frozenset)) else names


def _text(text_or_path: str | Path) -> str:
    if isinstance(text_or_path, Path):
        return text_or_path.read_text()
    return text_or_path


def as_workflow(workflow: Workflow | Mapping[str, Any]) -> Workflow:
    return workflow if isinstance(workflow, Workflow) else Workflow.from_dict(workflow)
