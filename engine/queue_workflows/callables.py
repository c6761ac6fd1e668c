"""Which code a node job may run: registered callables, and modules under the allowed packages.

A queue row names the code its worker runs, and anyone who can write the queue can write a
row; so a node's `call` (or a plain node job's `node_module`) is honoured only when it is

- registered in this process: `register_node_callable(fn)` (under its import string
  `"module:qualname"`) or `register_node_callable("name", fn)` (under that name too); a
  function handed to the `Workflow` builder is registered the same way; or
- a module under one of the allowed packages: `QW_NODE_PACKAGES` (comma-separated; an entry
  allows that module and its submodules, by dotted prefix), by default the top-level package
  of the application module (`QW_APP` / `--app`), plus `node_module_package` when set.

The check runs on the name before anything is imported (at enqueue and again on the worker,
so a row written by plain SQL is refused too), and again on the object found: it must be
defined in an allowed module, so `"myapp.nodes:os.system"` cannot reach out through an import.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar, overload

from queue_workflows import config
from queue_workflows.errors import InvalidPayloadError, QueueWorkflowsError
from queue_workflows.payloads import shown

F = TypeVar("F", bound=Callable[..., Any])

CALL_RE = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")
_MAX_NAME = 128  # a row's node_module holds at most this much

_lock = threading.Lock()
_registered: dict[str, Callable[..., Any]] = {}
_app: str | None = None


class CallableNotAllowedError(QueueWorkflowsError, LookupError):
    """A node names code that is neither registered nor under the allowed packages; nothing was imported."""


@overload
def register_node_callable(target: F, fn: None = None) -> F: ...
@overload
def register_node_callable(target: str, fn: F) -> F: ...
@overload
def register_node_callable(target: str, fn: None = None) -> Callable[[F], F]: ...
def register_node_callable(target: Any, fn: Any = None) -> Any:
    """Allow one function as a node's `call`: `register_node_callable(fn)`, `("name", fn)`, or as a decorator.

    It is registered under its import string (`"myapp.nodes:fetch"`), and under `name` when one
    is given; returns the function, so `@register_node_callable` and `@register_node_callable("fetch")` work.
    """
    if isinstance(target, str):
        name = _checked_name(target)
        if fn is None:
            return lambda f: _register(f, name)
        return _register(fn, name)
    if fn is not None:
        raise TypeError("register_node_callable(fn) or register_node_callable('name', fn), not (fn, fn)")
    return _register(target, None)


def _register(fn: Any, name: str | None) -> Any:
    if not callable(fn):
        raise TypeError(f"register_node_callable: {fn!r} is not callable")
    spec = import_string(fn)
    if name is None and spec is None:
        raise TypeError(f"register_node_callable: {fn!r} has no importable name (a lambda or nested function): give it one, register_node_callable('name', fn)")
    with _lock:
        for key in filter(None, (spec, name)):
            _registered[key] = fn
    return fn


def remember(fn: Any) -> None:
    """A function handed to the workflow builder: registered when it has an import string (else validate refuses it)."""
    if callable(fn) and import_string(fn) is not None:
        _register(fn, None)


def import_string(fn: Any) -> str | None:
    """`"module:qualname"` for a plain function or class, None when that would not name it (lambda, nested)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    spec = f"{module}:{qualname}"
    return spec if len(spec) <= _MAX_NAME and CALL_RE.match(spec) else None


def _checked_name(name: str) -> str:
    if len(name) > _MAX_NAME or not CALL_RE.match(name):
        raise ValueError(f"register_node_callable: name {shown(name)} is invalid: 'name', 'pkg.module' or 'pkg.module:function' (max {_MAX_NAME})")
    return name


def registered(call: object) -> Callable[..., Any] | None:
    with _lock:
        return _registered.get(call) if isinstance(call, str) else None


def note_app(module: str | None) -> None:
    """The application module this process imported (QW_APP / --app): its package is the default allow-list."""
    global _app
    _app = module


def reset() -> None:
    """Forget every registration and the noted application (tests)."""
    global _app
    with _lock:
        _registered.clear()
    _app = None


def allowed_packages(node_module_package: str | None = None) -> tuple[str, ...]:
    """QW_NODE_PACKAGES, else the application's top-level package; plus `node_module_package` when given."""
    settings = config.current().settings
    explicit: Iterable[str] | None = settings.node_packages
    if explicit is None:
        app = settings.app or _app
        explicit = [app.split(".")[0]] if app else []
    found = set(explicit)
    if node_module_package:
        found.add(node_module_package)
    return tuple(sorted(found))


def module_allowed(module: str, packages: Iterable[str]) -> bool:
    """`module` is one of `packages` or a submodule of one: a dotted prefix, never a bare string prefix."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def refusal(call: str, packages: tuple[str, ...], why: str) -> CallableNotAllowedError:
    allowed = ", ".join(packages) if packages else "none (QW_NODE_PACKAGES is unset and no QW_APP was imported)"
    return CallableNotAllowedError(
        f"node callable {shown(call)} is not allowed: {why}; allowed packages: {allowed}. "
        "Register it (register_node_callable) or add its package to QW_NODE_PACKAGES"
    )


def check_name(call: str, candidates: Iterable[str], packages: tuple[str, ...]) -> None:
    """Refuse `call` unless it is registered or one of its candidate modules is under `packages` (no import)."""
    if registered(call) is not None:
        return
    modules = list(candidates)
    if not any(module_allowed(m, packages) for m in modules):
        raise refusal(call, packages, f"module {shown(modules[-1])} is not under an allowed package")


def check_origin(target: Any, call: str, packages: tuple[str, ...]) -> None:
    """Refuse an object found through an allowed module but defined elsewhere (an import it made, a builtin)."""
    with _lock:
        if any(target is fn for fn in _registered.values()):
            return
    origin = getattr(target, "__module__", None)
    if not isinstance(origin, str) or not module_allowed(origin, packages):
        name = getattr(target, "__qualname__", type(target).__qualname__)
        raise refusal(call, packages, f"it resolves to {origin}.{name}, which is defined outside the allowed packages")


def import_allowed(module: str, call: str, packages: tuple[str, ...]) -> ModuleType:
    """Import `module` only when it is under `packages`: a refused module's import side effects never run."""
    if not module_allowed(module, packages):
        raise refusal(call, packages, f"module {shown(module)} is not under an allowed package")
    return importlib.import_module(module)


def attribute(module: ModuleType, path: str, call: str) -> Any:
    """`module.a.b` for `path` "a.b"; a dunder step (`__builtins__`, `__loader__`) is refused, not followed."""
    target: Any = module
    for part in path.split("."):
        if part.startswith("__"):
            raise CallableNotAllowedError(f"node callable {shown(call)} is not allowed: {part!r} is a dunder attribute")
        target = getattr(target, part, None)
    return target


def plain_node_callable(module_name: str) -> Callable[..., Any]:
    """The `run(inputs)` of a plain (non-DAG) node job: a registered callable, or an allowed module's `run`."""
    fn = registered(module_name)
    if fn is not None:
        return fn
    packages = allowed_packages()
    run = getattr(import_allowed(module_name, module_name, packages), "run", None)
    if not callable(run):
        raise InvalidPayloadError(f"node module {module_name!r} has no callable run(inputs)")
    check_origin(run, module_name, packages)
    return run


def check_plain_node(module_name: str) -> None:
    """Enqueue-time check of a plain node job's module (by name only: the enqueuer need not have the code)."""
    check_name(module_name, [module_name], allowed_packages())
