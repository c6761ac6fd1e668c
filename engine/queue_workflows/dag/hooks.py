"""Host-injected hooks for DAG workflows, each with a safe default.

- `set_workflow_provider(load_workflow, pipeline_schema=None)`: `start_run("name", ...)` asks
  `load_workflow(name)` (or, failing that, `pipeline_schema(name)`) for the definition.
- `set_node_module_package(pkg)` / `configure(node_module_package=pkg)`: a node's `call` is
  imported as `"<pkg>.<call>"` first, then as written.
- `set_node_resolver(fn)`: `fn(call)` returns the callable (or a module exposing `run`) itself;
  the resolver is then the allow-list (callables.py applies to calls it is not asked about).
- `set_invoke_context(factory)`: `factory(job, run)` is a context manager around each node invoke;
  it yields `finalize(delta) -> delta`, applied only when the node succeeded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from queue_workflows import callables, config
from queue_workflows.dag.definition import WorkflowValidationError

WorkflowLoader = Callable[[str], Any]
NodeResolver = Callable[[str], Any]
InvokeContext = Callable[[Mapping[str, Any], Mapping[str, Any]], AbstractContextManager[Callable[[Any], Any]]]

_workflow_provider: WorkflowLoader | None = None
_pipeline_schema: WorkflowLoader | None = None
_node_resolver: NodeResolver | None = None
_node_module_package: str | None = None
_invoke_context: InvokeContext | None = None


class UnresolvableCallableError(LookupError):
    pass


def set_workflow_provider(load_workflow: WorkflowLoader | None, pipeline_schema: WorkflowLoader | None = None) -> None:
    global _workflow_provider, _pipeline_schema
    _workflow_provider, _pipeline_schema = load_workflow, pipeline_schema


def set_node_resolver(fn: NodeResolver | None) -> None:
    global _node_resolver
    _node_resolver = fn


def set_node_module_package(package: str | None) -> None:
    global _node_module_package
    _node_module_package = package


def set_invoke_context(factory: InvokeContext | None) -> None:
    global _invoke_context
    _invoke_context = factory


def invoke_context() -> InvokeContext | None:
    return _invoke_context


def reset() -> None:
    """Forget every hook and node callable registration (tests)."""
    callables.reset()
    set_workflow_provider(None)
    set_node_resolver(None)
    set_node_module_package(None)
    set_invoke_context(None)


def load_workflow(name: str) -> Any:
    for loader in (_workflow_provider, _pipeline_schema):
        if loader is not None:
            found = loader(name)
            if found is not None:
                return found
    raise LookupError(f"no workflow named {name!r}: call set_workflow_provider(load_workflow) first")


def node_module_package() -> str | None:
    return _node_module_package or getattr(config.current().settings, "node_module_package", None)


def candidates(call: str) -> list[str]:
    """The modules `call` may name, in the order they are tried: under `node_module_package` first, then as written."""
    module_name = call.partition(":")[0]
    package = node_module_package()
    return ([f"{package}.{module_name}"] if package and not module_name.startswith(package + ".") else []) + [module_name]


def check_allowed(call: str) -> None:
    """Refuse `call` by name, importing nothing, unless it is registered, under the allowed packages, or left to the host's resolver."""
    if _node_resolver is None:
        callables.check_name(call, candidates(call), callables.allowed_packages(node_module_package()))


def check_allowed_calls(wf: Any) -> None:
    """WorkflowValidationError for the first node whose call `check_allowed` refuses."""
    for node in wf.nodes:
        if node.is_input or node.is_timer:
            continue
        try:
            check_allowed(node.call)
        except callables.CallableNotAllowedError as exc:
            raise WorkflowValidationError(f"workflow {wf.name!r}: node {node.id!r}: {exc}") from None


def resolve_callable(call: str) -> Callable[..., Any]:
    """The function a node's `call` names; UnresolvableCallableError says what was tried.

    A registered callable wins; else the host's resolver decides; else only modules under the
    allowed packages are imported (callables.py), and what is found must be defined under them.
    """
    fn = callables.registered(call)
    if fn is not None:
        return fn
    if _node_resolver is not None:
        return _callable_of(_node_resolver(call), call, [f"set_node_resolver({call!r})"])
    attr = call.partition(":")[2]
    packages = callables.allowed_packages(node_module_package())
    tried: list[str] = []
    refused: list[str] = []
    for candidate in candidates(call):
        if not callables.module_allowed(candidate, packages):
            refused.append(candidate)  # never imported: its import side effects must not run
            continue
        try:
            module = importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not candidate.startswith(exc.name) and not exc.name.startswith(candidate):
                raise  # the node's module exists but something it imports does not: say that, not "unresolvable"
            tried.append(candidate)
            continue
        target = _callable_of(callables.attribute(module, attr or "run", call), call, [f"{candidate}:{attr or 'run'}"])
        callables.check_origin(target, call, packages)
        return target
    if refused:
        raise callables.refusal(call, packages, f"module {refused[-1]!r} is not under an allowed package")
    raise UnresolvableCallableError(f"cannot import {call!r} (tried {', '.join(tried)})")


def _callable_of(target: Any, call: str, tried: list[str]) -> Callable[..., Any]:
    if target is not None and not callable(target):
        target = getattr(target, "run", None)  # a module exposing run(...)
    if not callable(target):
        raise UnresolvableCallableError(f"{call!r} names nothing callable (looked for {', '.join(tried)})")
    return target
