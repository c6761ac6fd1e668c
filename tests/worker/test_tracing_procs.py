"""Traces across real processes (docs/tracing.md): a producer enqueues inside its web request's span, workers on
other processes claim, load a model and run; every span reaches a real OTLP/HTTP receiver and they form one trace.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from procs import Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready

pytest.importorskip("opentelemetry.sdk", reason="the otel extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra")
from otlp_receiver import OtlpReceiver, Span  # noqa: E402 - needs opentelemetry-proto, the exporter's dependency

pytestmark = pytest.mark.multiprocess

HOST = "trace-box"
ERROR = 2  # Status.code of an error span


def _clean_env(database_url: str, **overrides: str) -> dict[str, str]:
    env = service_env(database_url, QW_APP="qw_trace_app", QW_HOST_LABEL=HOST, QW_LOG_FORMAT="json", QW_POLL_SECONDS="0.2")
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    env.update(overrides)
    return env


def _produce(env: dict[str, str], mode: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "qw_trace_app", mode], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one(spans: list[Span], what: str) -> Span:
    assert len(spans) == 1, f"{what}: {spans}"
    return spans[0]


def _by_id(rx: OtlpReceiver) -> dict[str, Span]:
    return {s.span_id: s for s in rx.spans}


def test_enqueue_claim_model_load_and_run_are_one_trace_across_processes(database_url: str, procs: Procs) -> None:
    with OtlpReceiver() as rx:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "qw-worker"}
        env = _clean_env(database_url, **otel)
        workers = [procs.worker(env, "fetch"), procs.worker(env, "load", "--batch=4"), procs.worker(env, "cpu"),
                   procs.worker(_clean_env(database_url, QW_APP="qw_gpu_nodes", **otel), "gpu")]
        orchestrator = procs.orchestrator(_clean_env(database_url))  # dispatch copies the context in the database: no tracing needed there
        wait_workers_ready(database_url, workers)
        wait_for_log(orchestrator, "orchestrator running", timeout=30)
        ids = _produce({**env, "OTEL_SERVICE_NAME": "web-app"}, "request")
        own = _produce({**env, "OTEL_SERVICE_NAME": "producer"}, "env")  # no application setup: the engine's provider

        def finished() -> bool:
            open_jobs = query(database_url, "SELECT count(*) AS n FROM ingest_jobs WHERE status NOT IN ('completed', 'failed')"
                                            " UNION ALL SELECT count(*) FROM workflow_runs WHERE status <> 'completed'"
                                            " UNION ALL SELECT count(*) FROM workflow_node_jobs WHERE status <> 'completed'")
            return all(r["n"] == 0 for r in open_jobs)

        wait_until(finished, timeout=60, what=f"every job to end\n{procs.logs()}")
        jobs = {r["id"]: r for r in query(database_url, "SELECT id, queue, status, trace_context FROM ingest_jobs")}
        nodes = {r["id"]: r for r in query(database_url, "SELECT id, run_id, node_name, trace_context FROM workflow_node_jobs")}
        expected_runs = len(jobs) + len(nodes)
        wait_until(lambda: len(rx.named("qw.run")) >= expected_runs, timeout=30,
                   what=f"{expected_runs} run spans (have {len(rx.named('qw.run'))})\n{procs.logs()}")
    spans = _by_id(rx)
    request = _one([s for s in rx.named("web.request")], "the request span")
    assert request.service == "web-app" and request.trace_id == ids["request_trace"]

    def chain(job_id: int, family: str = "ingest") -> tuple[Span, Span]:
        """The job's claim and run spans, each checked against the worker, host and job."""
        claim = _one(rx.named("qw.claim", **{"qw.job.id": job_id, "qw.family": family}), f"claim of job {job_id}")
        run = _one(rx.named("qw.run", **{"qw.job.id": job_id, "qw.family": family}), f"run of job {job_id}")
        for span in (claim, run):
            assert span.service == "qw-worker" and span.attributes["host.name"] == HOST, span
            assert span.attributes["qw.worker.id"].startswith(f"{HOST}:{span.attributes['qw.queue']}:"), span
            assert span.attributes["qw.attempt"] == 1, span
        assert run.parent_id == claim.span_id and run.trace_id == claim.trace_id
        return claim, run

    # One job: request -> qw.enqueue (producer) -> qw.claim -> qw.run (worker), the stored context on the row.
    enqueue = _one(rx.named("qw.enqueue", **{"qw.job.id": ids["ok"], "qw.family": "ingest"}), "the enqueue span")
    assert (enqueue.parent_id, enqueue.trace_id, enqueue.service) == (request.span_id, request.trace_id, "web-app")
    assert jobs[ids["ok"]]["trace_context"]["traceparent"].startswith(f"00-{request.trace_id}-{enqueue.span_id}-")
    claim, run = chain(ids["ok"])
    assert claim.parent_id == enqueue.span_id and claim.trace_id == request.trace_id
    assert (run.attributes["qw.queue"], run.attributes["qw.task"], run.status) == ("fetch", "traced", 0)

    # A failure: error status and the exception, in the same trace.
    _, failed = chain(ids["failing"])
    assert failed.trace_id == request.trace_id and failed.status == ERROR
    exception = _one([attrs for name, attrs in failed.events if name == "exception"], "the exception event")
    assert exception["exception.type"] == "builtins.ValueError" and "traced failure 2" in exception["exception.message"]

    # Bulk enqueues (one span per call, every item in it) run on a batch worker: each run in its job's trace,
    # linked to the batch's claim span, which is the worker's own trace linked back to each job's context.
    for job_id in ids["bulk"] + [i for i, r in jobs.items() if r["queue"] == "load" and i not in ids["bulk"]]:
        run = _one(rx.named("qw.run", **{"qw.job.id": job_id, "qw.family": "ingest"}), f"run of bulk job {job_id}")
        parent = spans[run.parent_id]
        assert parent.name == "qw.enqueue" and parent.parent_id == request.span_id and run.trace_id == request.trace_id
        batch_claim = spans[_one(run.links, "the run's link")[1]]
        assert batch_claim.name == "qw.claim" and batch_claim.parent_id is None and batch_claim.trace_id != request.trace_id
        assert (parent.trace_id, parent.span_id) in batch_claim.links
        assert job_id in batch_claim.attributes["qw.job.ids"]
    assert len(rx.named("qw.enqueue", **{"messaging.batch.message_count": 2})) == 1

    # A DAG run: its nodes (b dispatched by the orchestrator) carry the run's context and share its trace.
    run_rows = query(database_url, "SELECT trace_context FROM workflow_runs WHERE id = %s", (ids["run"],))
    start = _one(rx.named("qw.enqueue", **{"qw.family": "run"}), "the start_run span")
    assert start.parent_id == request.span_id
    dag_nodes = [n for n in nodes.values() if n["run_id"] == ids["run"]]
    assert sorted(n["node_name"] for n in dag_nodes) == ["a", "b"]
    for node in dag_nodes:
        assert node["trace_context"] == run_rows[0]["trace_context"]
        claim, run = chain(node["id"], "node")
        assert claim.parent_id == start.span_id and run.trace_id == request.trace_id and run.attributes["qw.run.id"] == ids["run"]

    # A gpu job: its model load is a span of its run.
    _, gpu_run = chain(ids["gpu"], "node")
    load = _one([s for s in rx.named("qw.model_load") if s.parent_id == gpu_run.span_id], "the model load")
    assert load.attributes["qw.model"] == "warm" and load.attributes["qw.model.hit"] is False and gpu_run.trace_id == request.trace_id

    # No active span: the enqueue is a root span of its own trace, with the application's provider or the engine's.
    for job_id, service in ((ids["outside"], "web-app"), (own["outside"], "producer")):
        root = _one(rx.named("qw.enqueue", **{"qw.job.id": job_id, "qw.family": "ingest"}), f"the root enqueue of {job_id}")
        assert root.parent_id is None and root.trace_id != request.trace_id and root.service == service
        claim, _ = chain(job_id)
        assert claim.parent_id == root.span_id
    assert own["otel_modules"], "the env-configured producer imported the SDK"

    # The JSON logs name the job's trace on every record the job produced, the task's own included.
    fetch_log = [json.loads(line) for line in workers[0].log_path.read_text().splitlines()]  # type: ignore[attr-defined]
    ok_lines = [r for r in fetch_log if r["job_id"] == ids["ok"]]
    assert any(r["logger"] == "qw_trace_app" for r in ok_lines) and any("completed in" in r["message"] for r in ok_lines)
    assert {r["trace_id"] for r in ok_lines} == {request.trace_id}


@pytest.mark.parametrize("otel", [{}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}],
                         ids=["no-otel-env", "sdk-disabled"])
def test_off_by_default_nothing_stored_and_opentelemetry_never_imported(database_url: str, procs: Procs, otel: dict[str, str]) -> None:
    env = _clean_env(database_url, **otel)
    produced = _produce(env, "plain")
    worker = procs.worker(env, "fetch", "--max-jobs=1")
    assert worker.wait(timeout=60) == 0, procs.logs()
    row = query(database_url, "SELECT status, trace_context, result FROM ingest_jobs WHERE id = %s", (produced["plain"],))[0]
    assert row["status"] == "completed" and row["trace_context"] is None
    assert produced["otel_modules"] == [] and row["result"]["otel_modules"] == [], (produced, row)
    assert row["result"]["pid"] == worker.pid
    lines = [json.loads(line) for line in worker.log_path.read_text().splitlines()]  # type: ignore[attr-defined]
    assert all(r["trace_id"] is None for r in lines) and any(r["job_id"] == produced["plain"] for r in lines)


def test_environment_switch() -> None:
    from queue_workflows.common.tracing import env_configured

    assert not env_configured({})
    assert env_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert env_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert env_configured({"OTEL_TRACES_EXPORTER": "console"})
    assert not env_configured({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not env_configured({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert env_configured({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not env_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "})


def test_a_stored_context_names_its_trace_without_opentelemetry() -> None:
    from queue_workflows.common.tracing import trace_id_of

    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of({"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}) == trace_id
    assert trace_id_of(None) is None and trace_id_of({}) is None
    assert trace_id_of({"traceparent": "garbage"}) is None
    assert trace_id_of({"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"}) is None
