"""The seed's documented names stay importable, and every face only re-exports from its home."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import queue_workflows

ENGINE = Path(queue_workflows.__file__).parent

# face module -> the package its code lives in
FACES = {
    "claim_worker": "queue_workflows.worker",
    "worker_control": "queue_workflows.control",
    "model_registry": "queue_workflows.gpu",
    "scheduler": "queue_workflows.schedule",
    "dispatcher": "queue_workflows.dag",
    "refs": "queue_workflows.dag",
    "hw_metrics": "queue_workflows.telemetry",
    "cgroup_attribution": "queue_workflows.telemetry",
}

# Names the seed's documents call, each as written there.
SEED_NAMES = [
    "queue_workflows.claim_worker.main",
    "queue_workflows.configure",
    "queue_workflows.db.bootstrap",
    "queue_workflows.migrations.dir",
    "queue_workflows.register_ingest_task",
    "queue_workflows.set_builtin_model_registrar",
    "queue_workflows.set_ingest_schedule",
    "queue_workflows.set_workflow_provider",
    "queue_workflows.model_registry.ModelSpec",
    "queue_workflows.scheduler.ScheduleEntry",
    "queue_workflows.worker_control.disable_worker",
    "queue_workflows.worker_control.enable_worker",
    "queue_workflows.hw_metrics.sample",
    "queue_workflows.cgroup_attribution.sample",
    "queue_workflows.dispatcher.advance",
    "queue_workflows.refs.resolve_ref",
]


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"{dotted} is not importable")


@pytest.mark.parametrize("dotted", SEED_NAMES)
def test_a_seed_name_still_resolves(dotted):
    assert callable(_resolve(dotted)), f"{dotted} should be callable (a function or a class)"


def _is_face_statement(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True  # the docstring
    if isinstance(node, ast.ImportFrom):
        return node.module == "__future__" or (node.level == 0 and (node.module or "").startswith("queue_workflows."))
    if isinstance(node, ast.Assign):
        return [getattr(t, "id", None) for t in node.targets] == ["__all__"]
    if isinstance(node, ast.If):  # `if __name__ == "__main__": raise SystemExit(main())`
        return ast.unparse(node.test) == "__name__ == '__main__'" and len(node.body) == 1 and isinstance(node.body[0], ast.Raise)
    return False


@pytest.mark.parametrize("face, home", sorted(FACES.items()))
def test_a_face_only_re_exports_from_its_home(face, home):
    module = importlib.import_module(f"queue_workflows.{face}")
    source = inspect.getsource(module)
    assert (module.__doc__ or "").startswith(f"Face: the seed's `queue_workflows.{face}`"), "a face says so on its first line"
    body = ast.parse(source).body
    extra = [ast.unparse(node).splitlines()[0] for node in body if not _is_face_statement(node)]
    assert not extra, f"a face holds no code of its own: {extra}"
    for name in module.__all__:
        obj = getattr(module, name)
        origin = getattr(obj, "__module__", None) or home
        assert origin.startswith(home) or not callable(obj), f"{face}.{name} comes from {origin}, not {home}"


def test_only_faces_say_face():
    """The label is how a newcomer tells faces from code: no other module may carry it."""
    labelled = {path.stem for path in ENGINE.glob("*.py")
                if (ast.get_docstring(ast.parse(path.read_text())) or "").startswith("Face:")}
    assert labelled == set(FACES)


def test_engine_code_imports_home_modules_not_faces():
    """Faces are for applications: inside the engine, every import names the module the code lives in."""
    offenders = []
    for path in sorted(ENGINE.rglob("*.py")):
        if path.stem in FACES and path.parent == ENGINE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.removeprefix("queue_workflows.") in FACES and name.startswith("queue_workflows."):
                    offenders.append(f"{path.relative_to(ENGINE)}: {name}")
    if (ENGINE / "__init__.py").exists():  # the package's __init__ exposes the faces on purpose
        offenders = [o for o in offenders if not o.startswith("__init__.py")]
    assert not offenders
