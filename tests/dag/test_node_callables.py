"""A queue row never chooses the code a worker runs: node callables are registered or under QW_NODE_PACKAGES.

Refused at enqueue (start_run, enqueue_node_job) with nothing written, and again by a real cpu
worker for a row written by plain SQL, without importing the module or calling anything.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from procs import TEST_INGEST_QUEUES, Procs, query, service_env, wait_exit
from psycopg.rows import dict_row

import queue_workflows
from queue_workflows import node_queue, testing
from queue_workflows.dag import Workflow, WorkflowValidationError
from queue_workflows.errors import ConfigError

APP_FILES = {
    "myapp/__init__.py": "",
    # An allowed module that imports dangerous things: reaching them through it must still be refused.
    "myapp/tasks.py": (
        "import os\nimport subprocess\n\n\n"
        "def write(path):\n    open(path, 'w').write('ran')\n    return {'wrote': path}\n\n\n"
        "def run(inputs):\n    return {'plain': inputs}\n"
    ),
    "myapp/registry.py": (
        "from queue_workflows import register_node_callable\n\n\n"
        "@register_node_callable('shout')\n"
        "def shout(text):\n    return {'loud': text.upper()}\n"
    ),
    # Importing it is already running it: its marker proves whether anyone imported it.
    "myapp_evil.py": (
        "import os\n"
        "open(os.path.join(os.path.dirname(__file__), 'IMPORTED-' + __name__), 'w').close()\n\n\n"
        "def f(path):\n    open(path, 'w').write('ran')\n    return {}\n\n\n"
        "def run(inputs):\n    return f(inputs['path'])\n"
    ),
}


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("node_callables_app")
    for name, text in APP_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def myapp(app_dir: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The engine configured as an operator would: QW_NODE_PACKAGES=myapp."""
    monkeypatch.syspath_prepend(str(app_dir))
    monkeypatch.setenv("QW_NODE_PACKAGES", "myapp")
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES)
    return app_dir


def counts(url: str) -> tuple[int, int]:
    row = query(url, "SELECT (SELECT count(*) FROM workflow_runs) AS runs, (SELECT count(*) FROM workflow_node_jobs) AS jobs")[0]
    return row["runs"], row["jobs"]


REFUSED_BY_NAME = [
    ("os:system", "module 'os' is not under an allowed package"),
    ("subprocess:run", "module 'subprocess' is not under an allowed package"),
    ("myapp_evil:f", "module 'myapp_evil' is not under an allowed package"),  # a bare string prefix of myapp
    ("myapp_evil", "module 'myapp_evil' is not under an allowed package"),
]
REFUSED_BY_ORIGIN = [
    ("myapp.tasks:os.system", "defined outside the allowed packages"),  # os, imported by an allowed module
    ("myapp.tasks:subprocess", "defined outside the allowed packages"),  # a module attribute: its run() is subprocess.run
    ("myapp.tasks:__builtins__", "'__builtins__' is a dunder attribute"),
]


@pytest.mark.parametrize("check_callables", [True, False])
@pytest.mark.parametrize(("call", "why"), REFUSED_BY_NAME)
def test_start_run_refuses_a_call_outside_the_allowed_packages_and_writes_nothing(myapp, database_url, call, why, check_callables):
    wf = {"name": "evil", "nodes": [{"id": "x", "call": call, "inputs": {"command": "true"}}]}
    with psycopg.connect(database_url) as caller:  # the caller's own transaction, which must stay usable
        with pytest.raises(WorkflowValidationError) as info:
            queue_workflows.start_run(wf, {}, conn=caller, check_callables=check_callables)
        good = queue_workflows.start_run(Workflow("good").node("w", "myapp.tasks:write", inputs={"path": "unused"}), {}, conn=caller)
        caller.commit()
    message = str(info.value)
    assert f"workflow 'evil': node 'x': node callable {call!r} is not allowed: {why}; allowed packages: myapp" in message, message
    assert "register_node_callable" in message and "QW_NODE_PACKAGES" in message
    assert query(database_url, "SELECT id FROM workflow_runs") == [{"id": good}]
    assert counts(database_url) == (1, 1)
    assert not (myapp / "IMPORTED-myapp_evil").exists(), "a refused module was imported"


@pytest.mark.parametrize(("call", "why"), REFUSED_BY_ORIGIN)
def test_start_run_refuses_an_allowed_module_attribute_defined_elsewhere(myapp, database_url, call, why):
    with pytest.raises(WorkflowValidationError) as info:
        queue_workflows.start_run({"name": "evil", "nodes": [{"id": "x", "call": call}]}, {})
    assert f"node callable {call!r} is not allowed: " in str(info.value) and why in str(info.value), str(info.value)
    assert counts(database_url) == (0, 0)


@pytest.mark.parametrize("module", ["os", "subprocess", "myapp_evil", "myappx.tasks"])
def test_enqueue_node_job_refuses_a_module_outside_the_allowed_packages(myapp, database_url, module):
    from queue_workflows.callables import CallableNotAllowedError

    with psycopg.connect(database_url) as caller:
        with pytest.raises(CallableNotAllowedError, match=rf"node callable '{module}' is not allowed: module '{module}' is not under an allowed package"):
            node_queue.enqueue_node_job("n", "cpu", node_module=module, conn=caller)
        with pytest.raises(CallableNotAllowedError):
            node_queue.enqueue_node_job(module, "cpu", conn=caller)  # the node name stands in for a missing module
        node_queue.enqueue_node_job("ok", "cpu", node_module="myapp.tasks", conn=caller)
        caller.commit()
    assert counts(database_url) == (0, 1)
    assert not (myapp / "IMPORTED-myapp_evil").exists()


@pytest.mark.parametrize(("module", "why"), [
    ("myapp.no_such_module", "cannot import 'myapp.no_such_module'"),
    ("myapp.tasks:no_such_function", "'myapp.tasks:no_such_function' names nothing callable"),
])
def test_enqueue_node_job_resolves_its_callable_before_writing(myapp, database_url, module, why):
    from queue_workflows.dag.hooks import UnresolvableCallableError

    with psycopg.connect(database_url) as caller:
        kept = node_queue.enqueue_node_job("ok", "cpu", node_module="myapp.tasks", conn=caller)
        with pytest.raises(UnresolvableCallableError) as info:
            node_queue.enqueue_node_job("n", "cpu", node_module=module, conn=caller)
        caller.commit()
    assert str(info.value).startswith(f"node_module {module!r}: ") and why in str(info.value), str(info.value)
    assert [r["id"] for r in query(database_url, "SELECT id FROM workflow_node_jobs")] == [kept["id"]]
    # an enqueuer without the workers' code opts out; the name is still checked
    assert node_queue.enqueue_node_job("n", "cpu", node_module=module, check_callable=False)["node_module"] == module
    with pytest.raises(queue_workflows.CallableNotAllowedError):
        node_queue.enqueue_node_job("n", "cpu", node_module="os", check_callable=False)


def test_the_default_allow_list_is_the_application_package(app_dir, database_url, monkeypatch):
    monkeypatch.syspath_prepend(str(app_dir))
    monkeypatch.delenv("QW_NODE_PACKAGES")
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, app="myapp.tasks")
    queue_workflows.start_run(Workflow("mine").node("w", "myapp.tasks:write", inputs={"path": "unused"}), {})
    for call in ("qw_dag_nodes:echo", "myapp_evil:f"):
        with pytest.raises(WorkflowValidationError, match=rf"{call!r} is not allowed: .* allowed packages: myapp\. "):
            queue_workflows.start_run(Workflow("other").node("x", call), {})
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES)  # no app, no list: only registered code
    with pytest.raises(WorkflowValidationError, match="allowed packages: none"):
        queue_workflows.start_run(Workflow("mine").node("w", "myapp.tasks:write"), {})
    assert counts(database_url) == (1, 1)


def test_qw_node_packages_is_a_list_of_dotted_module_names(monkeypatch):
    monkeypatch.setenv("QW_NODE_PACKAGES", " myapp , other.nodes,")
    assert queue_workflows.configure().settings.node_packages == frozenset({"myapp", "other.nodes"})
    for bad in ("my-app", "myapp.", "os system", "a..b"):
        monkeypatch.setenv("QW_NODE_PACKAGES", bad)
        with pytest.raises(ConfigError, match="QW_NODE_PACKAGES: .* is not a dotted module name"):
            queue_workflows.configure()


def double(x):
    return {"doubled": 2 * x}


def test_registered_callables_run_outside_the_allowed_packages(myapp, database_url):
    from queue_workflows import register_node_callable

    elsewhere = f"{double.__module__}:double"
    with pytest.raises(WorkflowValidationError, match=f"{elsewhere!r} is not allowed"):
        queue_workflows.start_run(Workflow("unregistered").node("d", elsewhere, inputs={"x": 2}), {})
    assert register_node_callable(double) is double  # also usable as a bare decorator
    register_node_callable("triple", lambda x: {"tripled": 3 * x})
    run_id = queue_workflows.start_run(
        Workflow("reg").node("d", elsewhere, inputs={"x": 2}).node("t", "triple", inputs={"x": 2}), {}
    )
    rows = {r["node_name"]: r for r in query(database_url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s", (run_id,))}
    assert testing.run_node_row(rows["d"]).result.obj == {"doubled": 4}
    assert testing.run_node_row(rows["t"]).result.obj == {"tripled": 6}
    with pytest.raises(WorkflowValidationError, match="'tests_elsewhere:double' is not allowed"):
        queue_workflows.start_run(Workflow("other").node("d", "tests_elsewhere:double"), {})


def test_a_workflow_provider_naming_os_system_is_refused(myapp, database_url):
    queue_workflows.set_workflow_provider(lambda name: {"name": name, "nodes": [{"id": "x", "call": "os:system"}]})
    with pytest.raises(WorkflowValidationError, match="node 'x': node callable 'os:system' is not allowed"):
        queue_workflows.start_run("provided", {})
    assert counts(database_url) == (0, 0)


def test_a_restart_replays_a_rewritten_call_and_the_worker_refuses_it(myapp, database_url, conn, tmp_path):
    from queue_workflows.worker.claim import ClaimWorker

    marker = tmp_path / "ran"
    run_id = queue_workflows.start_run(Workflow("r").node("a", "myapp.tasks:write", inputs={"path": str(marker)}, max_attempts=1), {})
    queue_workflows.cancel_run(run_id)
    # Anyone who can write the queue can rewrite a stored call; an operator's restart replays it.
    conn.execute("UPDATE workflow_node_jobs SET node_module = 'os:system', inputs = %s WHERE run_id = %s",
                 (psycopg.types.json.Jsonb({"command": f"touch {marker}"}), run_id))
    assert queue_workflows.restart_run(run_id, requested_by="operator")["reset"] == ["a"]
    assert ClaimWorker("cpu", max_jobs=1).run_forever() == 0
    row = conn.execute("SELECT status, error FROM workflow_node_jobs WHERE run_id = %s", (run_id,)).fetchone()
    assert not marker.exists(), "the rewritten call ran"
    assert row["status"] == "failed" and "node callable 'os:system' is not allowed" in row["error"], row


def _insert_node(url: str, module: str, inputs: dict, *, dag: bool = True) -> int:
    """A node job row written by plain SQL, as any role that can write the queue can."""
    rows = query(
        url,
        "INSERT INTO workflow_node_jobs (node_name, node_module, queue, inputs, input_refs, max_attempts) "
        "VALUES (%s, %s, 'cpu', %s, %s, 1) RETURNING id",
        (module.replace(":", "."), module, psycopg.types.json.Jsonb(inputs), psycopg.types.json.Jsonb({}) if dag else None),
    )
    return rows[0]["id"]


@pytest.mark.multiprocess
def test_a_real_worker_refuses_rows_naming_code_outside_the_allowed_packages(app_dir, database_url, procs: Procs, tmp_path):
    made = {name: tmp_path / name for name in ("system", "subprocess", "attribute", "allowed")}
    ids = {
        "system": _insert_node(database_url, "os:system", {"command": f"touch {made['system']}"}),
        "subprocess": _insert_node(database_url, "subprocess:run", {"args": ["touch", str(made["subprocess"])]}),
        "attribute": _insert_node(database_url, "myapp.tasks:os.system", {"command": f"touch {made['attribute']}"}),
        "evil_import": _insert_node(database_url, "myapp_evil", {"path": str(tmp_path / "evil")}, dag=False),
        "allowed": _insert_node(database_url, "myapp.tasks:write", {"path": str(made["allowed"])}),
        "plain": _insert_node(database_url, "myapp.tasks", {"n": 1}, dag=False),
    }
    env = service_env(database_url, QW_APP="myapp.tasks", PYTHONPATH=os.pathsep.join([str(app_dir), os.environ.get("PYTHONPATH", "")]))
    env.pop("QW_NODE_PACKAGES")  # the default: the application's package, myapp
    worker = procs.worker(env, "cpu", f"--max-jobs={len(ids)}")
    assert wait_exit(worker, 60, procs) == 0, procs.logs()
    rows = {r["id"]: r for r in query(database_url, "SELECT id, status, error, context_delta FROM workflow_node_jobs")}
    for name in ("system", "subprocess", "attribute"):
        assert not made[name].exists(), f"the refused {name} row ran: {rows[ids[name]]}"
    assert not (app_dir / "IMPORTED-myapp_evil").exists() and not (tmp_path / "evil").exists(), "a refused module was imported"
    for name in ("system", "subprocess", "attribute", "evil_import"):
        row = rows[ids[name]]
        assert row["status"] == "failed" and "CallableNotAllowedError: node callable" in row["error"] and "is not allowed" in row["error"], (name, row, procs.logs())
    assert "module 'os' is not under an allowed package; allowed packages: myapp." in rows[ids["system"]]["error"]
    assert "defined outside the allowed packages" in rows[ids["attribute"]]["error"]
    assert (rows[ids["allowed"]]["status"], made["allowed"].read_text()) == ("completed", "ran")
    assert (rows[ids["plain"]]["status"], rows[ids["plain"]]["context_delta"]) == ("completed", {"plain": {"n": 1}})


@pytest.mark.multiprocess
def test_a_real_worker_runs_a_callable_its_application_registered(app_dir, database_url, procs: Procs):
    job = _insert_node(database_url, "shout", {"text": "hi"})
    env = service_env(database_url, QW_APP="myapp.registry", QW_NODE_PACKAGES="", PYTHONPATH=os.pathsep.join([str(app_dir), os.environ.get("PYTHONPATH", "")]))
    worker = procs.worker(env, "cpu", "--max-jobs=1")
    assert wait_exit(worker, 60, procs) == 0, procs.logs()
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        row = conn.execute("SELECT status, context_delta, error FROM workflow_node_jobs WHERE id = %s", (job,)).fetchone()
    assert (row["status"], row["context_delta"]) == ("completed", {"loud": "HI"}), row
