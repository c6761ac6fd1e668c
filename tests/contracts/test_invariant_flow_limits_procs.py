"""Contract 10 across processes: 8 real workers share keys limited to 2 running each while
workers are killed with -9; the tasks record their own spans and how many of their key they saw
live, so an instant over the limit is caught by the jobs themselves. No job is lost, none runs
twice at once, and each key's rate limit holds within 5 % (docs/flow_control.md)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.ops.flow import set_flow_limit

pytestmark = pytest.mark.multiprocess

LIMIT = 2


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("flow_span", qw_test_app.flow_span)


def _max_overlap(spans: list[dict]) -> int:
    """The most spans open at one instant (sweep line; an end sorts before a start at the same instant)."""
    events = sorted([(s["started_at"], 1) for s in spans] + [(s["ended_at"], -1) for s in spans])
    open_now = peak = 0
    for _, step in events:
        open_now += step
        peak = max(peak, open_now)
    return peak


def _run_with_kills(url: str, procs: Procs, *, basins: int, per_basin: int, sleep: float, kills: int) -> None:
    env = service_env(url, QW_LEASE_SECONDS="60", QW_LEASE_RENEW_SECONDS="20")
    orchestrator = procs.orchestrator(env)
    workers = [procs.worker(env, "alpha") for _ in range(8)]
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    wait_workers_ready(url, workers)
    set_flow_limit("alpha", max_running=LIMIT, key_path="args.basin")
    tokens = [f"b{b}-{i}" for i in range(per_basin) for b in range(basins)]
    with db.connect(url=url) as conn, conn.transaction():
        for token in tokens:
            node_queue.enqueue_ingest_job("flow_span", "alpha", {"basin": token.split("-")[0], "token": token, "sleep": sleep}, conn=conn)

    killed = 0
    while killed < kills:  # kill -9 a worker in the middle of one of its jobs
        busy = wait_until(lambda: query(url, "SELECT h.pid FROM worker_heartbeats h JOIN ingest_jobs j ON j.claimed_by = h.worker_id "
                                              "WHERE j.status = 'running' AND h.pid = ANY(%s) LIMIT 1",
                                        ([w.pid for w in workers if w.poll() is None],)),
                          timeout=30, interval=0.02, what="a busy worker to kill")
        os.kill(busy[0]["pid"], signal.SIGKILL)
        next(w for w in workers if w.pid == busy[0]["pid"]).wait()
        killed += 1
        time.sleep(sleep / 2)

    done = lambda: query(url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'completed'")[0]["n"] == len(tokens)  # noqa: E731
    wait_until(done, timeout=120, interval=0.1, what=f"{len(tokens)} jobs completed\n{procs.logs()}")

    spans = query(url, "SELECT key, token, pid, started_at, ended_at, live_seen FROM test_flow_spans")
    seen = max(s["live_seen"] or 0 for s in spans)
    assert seen <= LIMIT, f"a task saw {seen} live jobs of its key (limit {LIMIT})\n{procs.logs()}"
    finished = [s for s in spans if s["ended_at"] is not None]
    for key in {s["key"] for s in spans}:
        peak = _max_overlap([s for s in finished if s["key"] == key])
        assert peak <= LIMIT, f"key {key}: {peak} finished spans overlapped (limit {LIMIT})"
    for token in tokens:
        assert _max_overlap([s for s in finished if s["token"] == token]) <= 1, f"{token} ran twice at once"
    assert {s["token"] for s in finished} == set(tokens), "a job was lost"
    assert len(spans) - len(finished) <= kills, "more spans cut short than workers killed"
    assert max(_max_overlap([s for s in finished if s["key"] == k]) for k in {s["key"] for s in spans}) == LIMIT, \
        "the limit was never reached: the test proves nothing"
    assert query(url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'running'")[0]["n"] == 0


def test_eight_workers_with_kill_9_never_pass_a_key_limit(database_url: str, procs: Procs) -> None:
    _run_with_kills(database_url, procs, basins=2, per_basin=6, sleep=0.3, kills=1)


@pytest.mark.soak
def test_eight_workers_with_kill_9_never_pass_a_key_limit_soak(database_url: str, procs: Procs) -> None:
    _run_with_kills(database_url, procs, basins=5, per_basin=40, sleep=0.2, kills=5)
