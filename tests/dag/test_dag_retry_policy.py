"""Per-node timeouts and retry policy: validation, the decision, and both worker modes applying it to real rows.

The watchdog's part (a node's `timeout`) runs in real worker processes with sub-second timeouts;
backoff is read off the row (`run_after - updated_at`, written by one statement), never slept out.
"""

from __future__ import annotations

import pytest
from procs import Procs, query, service_env, wait_exit

import queue_workflows
from queue_workflows import node_queue
from queue_workflows.claim_worker import ClaimWorker
from queue_workflows.common import retry_policy
from queue_workflows.common.retry_policy import decide, exception_names
from queue_workflows.dag import Workflow, WorkflowValidationError
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.errors import InvalidPayloadError, NodeTimeout
from queue_workflows.worker.batch import BatchWorker

N = "qw_dag_nodes"
PLAIN = "qw_test_nodes"  # a plain node job's module: run(inputs) sleeps `sleep`, then raises `raise` or returns
FIXED = {"base": 30, "max": 30, "jitter": 0}


class Throttled(ConnectionError):
    """A transient failure a node might raise (a ConnectionError, so an OSError)."""


def always_throttled():
    raise Throttled("429")


def bad_value():
    raise ValueError("bad input")


def row(url: str, job_id: int) -> dict:
    [r] = query(url, "SELECT *, extract(epoch FROM run_after - updated_at) AS backoff FROM workflow_node_jobs WHERE id = %s", (job_id,))
    return r


def make_due(url: str, job_id: int) -> None:
    query(url, "UPDATE workflow_node_jobs SET run_after = now() WHERE id = %s", (job_id,))


# -- the decision, pure -----------------------------------------------------------------------


def test_no_retry_on_is_read_first_and_retry_on_then_limits_what_is_retried():
    names = exception_names(FileNotFoundError)  # FileNotFoundError -> OSError -> Exception -> BaseException

    def verdict(**policy):
        return decide(policy, names, attempts=1, max_attempts=3, base=2, cap=300, random_fn=lambda: 0.5)

    assert verdict().retry_in == 2.0  # no policy: the worker's default backoff
    assert verdict(retry_on=["OSError"]).retry_in == 2.0  # a base class matches
    assert verdict(retry_on=["ValueError"]).why == "no retry: FileNotFoundError is not in retry_on ['ValueError']"
    assert verdict(no_retry_on=["FileNotFoundError"]).why == "no retry: FileNotFoundError is in no_retry_on"
    assert verdict(no_retry_on=["OSError"]).why == "no retry: FileNotFoundError (as OSError) is in no_retry_on"
    assert verdict(retry_on=["OSError"], no_retry_on=["FileNotFoundError"]).retry_in is None  # no_retry_on wins
    assert verdict(no_retry_on=["builtins.OSError"]).retry_in is None  # qualified by module
    assert verdict(no_retry_on=["requests.OSError"]).retry_in == 2.0  # another module's class of that name
    assert decide({}, names, attempts=3, max_attempts=3, base=2, cap=300).retry_in is None  # attempts spent
    assert decide({"retry_on": ["ValueError"]}, (), attempts=1, max_attempts=3, base=2, cap=300).retry_in is not None  # no exception known


def test_a_package_qualified_name_matches_a_class_defined_in_a_submodule():
    names = ("requests.exceptions:HTTPError", "requests.exceptions:RequestException", "builtins:OSError", "builtins:Exception")
    assert retry_policy.matching("requests.HTTPError", names) == "requests.exceptions:HTTPError"
    assert retry_policy.matching("requests.exceptions.HTTPError", names) == "requests.exceptions:HTTPError"
    assert retry_policy.matching("request.HTTPError", names) is None  # a prefix of a name is not a package
    assert retry_policy.matching("HTTPError", names) == "requests.exceptions:HTTPError"


def test_the_policy_backoff_doubles_from_base_up_to_max():
    backoff = {"retry_backoff": {"base": 3, "max": 10, "jitter": 0}}
    delays = [decide(backoff, (), attempts=n, max_attempts=9, base=2, cap=300).retry_in for n in range(1, 5)]
    assert delays == [3.0, 6.0, 10.0, 10.0]


def test_a_node_timeout_is_a_timeout_error_that_a_policy_can_name():
    names = exception_names(NodeTimeout)
    assert names[0] == "queue_workflows.errors:NodeTimeout" and "builtins:TimeoutError" in names
    assert decide({"no_retry_on": ["NodeTimeout"]}, names, attempts=1, max_attempts=3, base=2, cap=9).retry_in is None
    assert decide({"retry_on": ["TimeoutError"]}, names, attempts=1, max_attempts=3, base=2, cap=9).retry_in is not None


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("keys", "message"), [
    ({"timeout": 0}, "node 'a': timeout must be a positive number of seconds, not 0"),
    ({"timeout": "5"}, "node 'a': timeout must be a positive number of seconds, not '5'"),
    ({"timeout": float("inf")}, "node 'a': timeout must be a positive number"),
    ({"timeout": True}, "node 'a': timeout must be a positive number"),
    ({"retry_backoff": [1, 2]}, "node 'a': retry_backoff must be {'base': seconds, 'max': seconds}"),
    ({"retry_backoff": {"base": 1}}, "node 'a': retry_backoff must be {'base': seconds, 'max': seconds}"),
    ({"retry_backoff": {"base": 1, "max": 5, "factor": 3}}, "node 'a': retry_backoff must be"),
    ({"retry_backoff": {"base": 10, "max": 5}}, r"node 'a': retry_backoff.base \(10\) must not exceed retry_backoff.max \(5\)"),
    ({"retry_backoff": {"base": -1, "max": 5}}, "node 'a': retry_backoff.base must be a positive number"),
    ({"retry_backoff": {"base": 1, "max": 5, "jitter": 1}}, "node 'a': retry_backoff.jitter must be a number from 0 to below 1"),
    ({"retry_on": "ValueError"}, "node 'a': retry_on must be a non-empty list of exception class names"),
    ({"retry_on": []}, "node 'a': retry_on must be a non-empty list"),
    ({"no_retry_on": ["Value Error"]}, "node 'a': no_retry_on: 'Value Error' is not an exception class name"),
    ({"no_retry_on": [3]}, "node 'a': no_retry_on: 3 is not an exception class name"),
    ({"retry_on": ["E"] * 101}, "node 'a': retry_on names 101 exceptions; at most 100"),
    ({"timeout": 5, "budget_seconds": 60}, "node 'a': give timeout .* or budget_seconds .*, not both"),
])
def test_a_bad_policy_is_refused_naming_the_node_and_the_key_and_writes_nothing(database_url, keys, message):
    with pytest.raises(WorkflowValidationError, match=message):
        queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo", **keys), {})
    with pytest.raises(WorkflowValidationError, match=message):  # the data form the same
        queue_workflows.start_run({"name": "w", "nodes": [{"id": "a", "call": f"{N}:echo", **keys}]}, {})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 0}]


def test_an_input_step_takes_no_policy(database_url):
    with pytest.raises(WorkflowValidationError, match="node 'ask': a node of kind 'input' runs no code of its own: it takes no timeout, retry_on"):
        queue_workflows.start_run(Workflow("w").node("ask", input=True, timeout=3, retry_on=["ValueError"]), {})


def test_enqueue_node_job_checks_its_policy_before_writing(database_url):
    with pytest.raises(InvalidPayloadError, match="retry_policy has unknown key.s. retries"):
        node_queue.enqueue_node_job("x", "cpu", node_module=PLAIN, retry_policy={"retries": 3})
    with pytest.raises(InvalidPayloadError, match="no_retry_on must be a non-empty list"):
        node_queue.enqueue_node_job("x", "cpu", node_module=PLAIN, retry_policy={"no_retry_on": "ValueError"})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs") == [{"n": 0}]
    job = node_queue.enqueue_node_job("x", "cpu", node_module=PLAIN, retry_policy={"timeout": 2, "retry_on": ("OSError",)})
    assert row(database_url, job["id"])["retry_policy"] == {"timeout": 2.0, "retry_on": ["OSError"]}


def test_the_policy_travels_on_the_node_row_and_round_trips_the_data_form(database_url):
    wf = Workflow("w").node("a", f"{N}:echo", timeout=1.5, retry_backoff={"base": 1, "max": 8}, retry_on=("OSError",), no_retry_on=["ValueError"])
    again = Workflow.from_dict(wf.to_dict())
    assert again.to_dict() == wf.to_dict() and wf.to_dict()["nodes"][0]["retry_on"] == ["OSError"]
    run_id = queue_workflows.start_run(again, {})
    [stored] = query(database_url, "SELECT retry_policy FROM workflow_node_jobs WHERE run_id = %s", (run_id,))
    assert stored["retry_policy"] == {"timeout": 1.5, "retry_backoff": {"base": 1.0, "max": 8.0, "jitter": 0.2},
                                      "retry_on": ["OSError"], "no_retry_on": ["ValueError"]}


# -- both worker modes, in process ---------------------------------------------------------------


def _worker(mode: str, n: int):
    return ClaimWorker("cpu", max_jobs=n) if mode == "one" else BatchWorker("cpu", batch_size=10, max_jobs=n)


@pytest.mark.parametrize("mode", ["one", "batch"])
def test_each_worker_mode_applies_the_nodes_retry_on_and_no_retry_on(database_url, conn, mode):
    wf = (
        Workflow("policy")
        .node("refused", bad_value, no_retry_on=["ValueError"])
        .node("unlisted", bad_value, retry_on=["OSError"])
        .node("listed", always_throttled, retry_on=["OSError"], no_retry_on=["ValueError"], retry_backoff=FIXED)
        .node("default", bad_value, max_attempts=1)
    )
    run_id = queue_workflows.start_run(wf, {})
    _worker(mode, 4).run_forever()
    rows = {r["node_name"]: r for r in query(
        database_url, "SELECT *, extract(epoch FROM run_after - updated_at) AS backoff FROM workflow_node_jobs WHERE run_id = %s", (run_id,))}
    assert (rows["refused"]["status"], rows["refused"]["attempts"]) == ("failed", 1)
    assert rows["refused"]["error"].startswith("no retry: ValueError is in no_retry_on\nTraceback"), rows["refused"]["error"]
    assert (rows["unlisted"]["status"], rows["unlisted"]["attempts"]) == ("failed", 1)
    assert rows["unlisted"]["error"].startswith("no retry: ValueError is not in retry_on ['OSError']")
    assert (rows["listed"]["status"], rows["listed"]["attempts"], rows["listed"]["backoff"]) == ("scheduled", 1, 30)
    assert "Throttled: 429" in rows["listed"]["error"]
    assert rows["default"]["status"] == "failed" and rows["default"]["error"].startswith("Traceback")  # attempts spent: no reason added
    DispatchDrain().drain_once(conn)  # a node the policy did not retry fails its run like one out of attempts
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "failed" and status["nodes"]["listed"]["status"] == "cancelled"


@pytest.mark.parametrize("mode", ["one", "batch"])
def test_the_nodes_own_backoff_spaces_its_retries_on_the_row(database_url, mode):
    job_id = node_queue.enqueue_node_job("t", "cpu", node_module=PLAIN, inputs={"raise": "boom"}, max_attempts=4,
                                         retry_policy={"retry_backoff": {"base": 7, "max": 20, "jitter": 0}})["id"]
    spacing = []
    for _ in range(3):
        _worker(mode, 1).run_forever()
        stored = row(database_url, job_id)
        assert stored["status"] == "scheduled", stored
        spacing.append(stored["backoff"])
        make_due(database_url, job_id)
    _worker(mode, 1).run_forever()
    assert spacing == [7, 14, 20]
    assert (row(database_url, job_id)["status"], row(database_url, job_id)["attempts"]) == ("failed", 4)


# -- the timeout, enforced by the watchdog in real worker processes --------------------------------


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", ["one", "batch"])
def test_a_node_past_its_timeout_is_stopped_and_retried_or_failed_by_its_policy(database_url: str, procs: Procs, mode: str) -> None:
    policy = {"timeout": 0.3, "retry_backoff": FIXED}
    slow = node_queue.enqueue_node_job("slow", "cpu", node_module=PLAIN, inputs={"sleep": 30}, max_attempts=2, retry_policy=policy)["id"]
    never = node_queue.enqueue_node_job("never", "cpu", node_module=PLAIN, inputs={"sleep": 30},
                                        retry_policy={"timeout": 0.3, "no_retry_on": ["TimeoutError"]})["id"]
    fine = node_queue.enqueue_node_job("fine", "cpu", node_module=PLAIN, retry_policy={"timeout": 20})["id"]
    env = service_env(database_url, QW_BATCH_SIZE="10" if mode == "batch" else "1")

    def run_one_worker() -> None:
        worker = procs.worker(env, "cpu")
        assert wait_exit(worker, 30, procs) == 75, procs.logs()  # the watchdog's exit: the process ends, not the code

    run_one_worker()  # 'slow' times out first (claim order); in a batch, 'never' and 'fine' go back unstarted
    first = row(database_url, slow)
    assert (first["status"], first["attempts"], first["backoff"], first["watchdog_trips"]) == ("scheduled", 1, 30, 0), first
    assert first["error"].startswith("NodeTimeout: attempt 1 ran past its timeout of 0.3s"), first["error"]
    run_one_worker()  # 'never' times out and is not retried
    gave_up = row(database_url, never)
    assert (gave_up["status"], gave_up["attempts"]) == ("failed", 1), gave_up
    assert gave_up["error"].startswith("no retry: NodeTimeout (as TimeoutError) is in no_retry_on\nNodeTimeout: attempt 1"), gave_up["error"]
    make_due(database_url, slow)
    run_one_worker()  # 'fine' completes within its timeout, then the second attempt of 'slow' times out as well: attempts spent
    assert row(database_url, fine)["status"] == "completed"
    last = row(database_url, slow)
    assert (last["status"], last["attempts"]) == ("failed", 2) and last["error"].startswith("NodeTimeout: attempt 2"), last


@pytest.mark.multiprocess
def test_in_a_threads_batch_only_the_row_past_its_timeout_is_charged_the_others_go_back(database_url: str, procs: Procs) -> None:
    slow = node_queue.enqueue_node_job("slow", "cpu", node_module=PLAIN, inputs={"sleep": 30}, max_attempts=2,
                                       retry_policy={"timeout": 0.3, "retry_backoff": FIXED})["id"]
    busy = node_queue.enqueue_node_job("busy", "cpu", node_module=PLAIN, inputs={"sleep": 3})["id"]
    env = service_env(database_url, QW_BATCH_SIZE="10", QW_BATCH_MODE="threads", QW_BATCH_CONCURRENCY="2")
    worker = procs.worker(env, "cpu")
    assert wait_exit(worker, 30, procs) == 75, procs.logs()
    timed_out, bystander = row(database_url, slow), row(database_url, busy)
    assert (timed_out["status"], timed_out["attempts"], timed_out["backoff"]) == ("scheduled", 1, 30), timed_out
    assert timed_out["error"].startswith("NodeTimeout: attempt 1 ran past its timeout of 0.3s"), timed_out["error"]
    assert (bystander["status"], bystander["attempts"], bystander["watchdog_trips"]) == ("queued", 0, 0), bystander  # handed back uncharged
