"""A gpu worker's cold claim against its plan (gpu_model_plan): which model it loads next.

Other gpu workers are heartbeat rows whose worker lock a connection of ours holds, so they
count as live; "this" worker is a claim statement with its own loaded models and free VRAM.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from procs import query, wait_until

import queue_workflows
from queue_workflows import jobstore, node_queue
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE

ME = jobstore.Claimant("w-me", 901)


@pytest.fixture
def others(database_url, conn):
    """`add(name, key, free_gb=None, loaded=())`: a live gpu worker; its lock is held until the test ends."""
    holders: list[psycopg.Connection] = []

    def add(name: str, key: int, free_gb: float | None = None, loaded: tuple[str, ...] = (), swapping: bool = False) -> str:
        holder = psycopg.connect(database_url, autocommit=True)
        holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, key))
        holders.append(holder)
        conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, vram_free_gb, loaded_models, swapping) "
                     "VALUES (%s, %s, 'gpu', 1, %s, %s, %s, %s)", (name, name, key, free_gb, list(loaded), swapping))
        return name

    yield add
    for h in holders:
        h.close()


def claim(vram_available_gb: float | None = None, loaded: tuple[str, ...] = (), claimant: jobstore.Claimant = ME):
    statement = node_queue.claim_statement("workflow_node_jobs", "gpu", claimant, current_model=loaded[0] if loaded else None,
                                           loaded_models=loaded, vram_available_gb=vram_available_gb)
    return jobstore.fetch_one(None, statement)


def enqueue(model: str | None, n: int = 1) -> list[int]:
    return [node_queue.enqueue_node_job(f"{model}-{i}", "gpu", node_module="qw_test_nodes", required_model=model)["id"] for i in range(n)]


def models(conn, **gb: float) -> None:
    for model_id, est in gb.items():
        conn.execute("INSERT INTO gpu_models (model_id, est_vram_gb) VALUES (%s, %s)", (model_id, est))


def running_for(conn, worker_id: str, model: str) -> None:
    """`worker_id` has claimed a job for `model` (it is loading or running it)."""
    (job_id,) = enqueue(model)
    conn.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = %s WHERE id = %s", (worker_id, job_id))


def history(conn, model: str, *, job_seconds: float, load_seconds: float, jobs: int = 5) -> None:
    """Finished jobs of `model`: one load of `load_seconds`, then hits of `job_seconds`."""
    for i in range(jobs + 1):
        conn.execute(
            "INSERT INTO workflow_node_jobs (node_name, queue, required_model, status, finished_at, model_hit, model_load_seconds, wall_seconds) "
            "VALUES (%s, 'gpu', %s, 'completed', now() - make_interval(secs => %s), %s, %s, %s)",
            (f"done-{model}-{i}", model, jobs - i, i > 0, 0.0 if i else load_seconds, job_seconds if i else load_seconds + job_seconds),
        )


def test_a_model_only_this_worker_can_fit_goes_first(conn, others):
    models(conn, small=8, big=24)
    others("w-small-1", 911, free_gb=10)
    others("w-small-2", 912, free_gb=10)
    small = enqueue("small", 3)
    big = enqueue("big", 3)
    assert claim(vram_available_gb=24)["id"] == big[0], "the older small jobs wait: two other workers can run them, none can run big"
    assert claim(vram_available_gb=10, claimant=jobstore.Claimant("w-small-3", 913))["id"] == small[0]


def test_a_model_only_this_worker_can_fit_goes_before_its_warm_model(conn, others):
    models(conn, small=8, big=24)
    others("w-small", 914, free_gb=10)
    warm = enqueue("small", 3)
    big = enqueue("big", 1)
    assert claim(vram_available_gb=24, loaded=("small",))["id"] == big[0], "the other worker can take the small jobs; none but us the big one"
    assert claim(vram_available_gb=24, loaded=("small",))["id"] == warm[0]


def test_alone_a_worker_keeps_to_its_warm_model_and_takes_model_free_jobs_in_turn(conn):
    a = enqueue("A", 2)
    free = enqueue(None, 1)
    enqueue("B", 1)
    assert claim(loaded=("A",))["id"] == a[0]
    assert claim(loaded=("A",))["id"] == a[1]
    assert claim(loaded=("A",))["id"] == free[0], "no other worker: nothing is 'only ours', so no model jumps the queue"


def test_a_model_nobody_holds_goes_before_a_second_copy(conn, others):
    others("w-a", 921)
    running_for(conn, "w-a", "A")  # W-A is loading A: its heartbeat does not say so yet
    a = enqueue("A", 10)
    b = enqueue("B", 1)
    assert claim()["id"] == b[0], "A's ten older jobs are left to the worker loading it"
    assert claim()["id"] == a[0], "nothing else to do: ten queued A jobs are worth a second copy (second_copy_backlog 2)"


def test_a_warm_holder_keeps_its_model_while_the_queue_is_short(conn, others):
    others("w-a", 931, loaded=("A",))
    enqueue("A", 1)
    assert claim() is None, "one queued job for a model a live worker holds warm: not worth a second copy"
    enqueue("A", 1)
    assert claim()["required_model"] == "A", "two queued per holder: a second copy"


def test_a_swapping_or_dead_holder_does_not_hold(conn, others):
    others("w-swap", 941, loaded=("A",), swapping=True)
    conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, loaded_models) "
                 "VALUES ('w-dead', 'w-dead', 'gpu', 1, 942, '{B}')")  # no session holds lock 942
    enqueue("A", 1)
    enqueue("B", 1)
    assert {claim()["required_model"], claim()["required_model"]} == {"A", "B"}


def test_a_second_copy_needs_more_queued_work_than_one_load_per_holder(conn, others):
    history(conn, "A", job_seconds=0.1, load_seconds=10.0)
    others("w-a", 951, loaded=("A",))
    enqueue("A", 50)  # 5 s of work: less than the 10 s a load costs
    assert claim() is None
    enqueue("A", 60)  # 11 s of work
    assert claim()["required_model"] == "A"


def test_the_work_rule_counts_every_holder(conn, others):
    history(conn, "A", job_seconds=1.0, load_seconds=5.0)
    others("w-a1", 961, loaded=("A",))
    others("w-a2", 962)
    running_for(conn, "w-a2", "A")
    # Two holders (w-a2 busy with a job just started: 1 s left): a third copy needs
    # queued x 1 s + 1 s > 2 x (5 s load + 1 s job), more than 11 queued.
    enqueue("A", 11)
    assert claim() is None
    enqueue("A", 1)
    assert claim()["required_model"] == "A"


def test_jobs_without_a_model_and_warm_models_need_no_plan(conn, others):
    others("w-a", 971, loaded=("A",))
    models(conn, A=30)
    a = enqueue("A", 1)
    free = enqueue(None, 1)
    assert claim(vram_available_gb=4)["id"] == free[0]
    assert claim(vram_available_gb=4) is None, "A is held elsewhere and would not fit here"
    assert claim(vram_available_gb=4, loaded=("A",))["id"] == a[0], "warm here: no plan, no VRAM check"


def _rows_read(node: dict) -> list[tuple[int, str]]:
    """(rows a plan node read over all its loops, what it was) for `node` and everything under it."""
    loops = node.get("Actual Loops", 1)
    read = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)) * loops
    what = f"{node['Node Type']} {node.get('Index Name') or node.get('Relation Name') or ''}".strip()
    found = [(int(read), what)]
    for child in node.get("Plans", []):
        found += _rows_read(child)
    return found


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
def test_a_claim_reads_a_few_index_entries_per_model_whatever_the_backlog(conn, others, plan_mode):
    """6,000 queued jobs in per-model blocks, 100 needing no model, and a model held elsewhere (the
    last block) whose queue the rule must count: the claim still reads a handful of job rows."""
    others("w-c", 981, loaded=("C",))
    for model in ("A", "B", "C"):
        conn.execute("INSERT INTO workflow_node_jobs (node_name, queue, required_model) "
                     "SELECT 'n' || g, 'gpu', %s FROM generate_series(1, 2000) AS g", (model,))
    conn.execute("INSERT INTO workflow_node_jobs (node_name, queue) SELECT 'free' || g, 'gpu' FROM generate_series(1, 100) AS g")
    conn.execute("ANALYZE workflow_node_jobs")
    first_b = conn.execute("SELECT min(id) AS id FROM workflow_node_jobs WHERE required_model = 'B'").fetchone()["id"]
    query, params = node_queue.claim_statement("workflow_node_jobs", "gpu", ME, current_model="B", loaded_models=("B",), vram_available_gb=None)
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT set_config('plan_cache_mode', %s, true)", (plan_mode,))
        with conn.transaction(force_rollback=True):  # EXPLAIN ANALYZE claims too: undo it
            (plan,) = conn.execute(psycopg.sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + query, params).fetchone().values()
        claimed = conn.execute(query, params).fetchone()
    assert claimed["id"] == first_b, "the warm model's oldest job"
    read = [(n, what) for n, what in _rows_read(plan[0]["Plan"]) if "workflow_node_jobs" in what]
    worst = max(read)
    assert worst[0] <= 20, f"a claim reads index entries per model, not the backlog: {worst[1]} read {worst[0]} rows ({read})"


def test_routed_gpu_claims_take_turns_so_a_claim_in_flight_counts(database_url, conn, others):
    """W-X has claimed an A job but not committed yet: our claim waits its turn, then sees A taken."""
    others("w-x", 991)
    a = enqueue("A", 2)
    b = enqueue("B", 1)
    with psycopg.connect(database_url) as x:
        x.execute(*node_queue.claim_prelude("gpu"))
        x.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = 'w-x' WHERE id = %s", (a[0],))
        got: list[dict] = []
        mine = threading.Thread(target=lambda: got.append(node_queue.claim_node_job("gpu", ME)))
        mine.start()
        wait_until(lambda: query(database_url, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                                                    "AND wait_event_type = 'Lock' AND query LIKE '%%gpu_claim_turns%%'"),
                   timeout=10, what="our claim waiting for its turn")
        assert not got
        x.commit()
        mine.join(timeout=10)
    assert got and got[0]["id"] == b[0], "A is being loaded by W-X, and one queued A job is not worth a second copy"


def test_claim_preludes_only_for_routed_gpu_claims():
    assert node_queue.claim_prelude("cpu") is None
    assert node_queue.claim_prelude("gpu") is not None
    queue_workflows.configure(gpu_routing="fifo")
    assert node_queue.claim_prelude("gpu") is None


def test_advisory_lock_namespaces_are_distinct():
    from queue_workflows import jobstore
    from queue_workflows.worker import idle_baton

    spaces = [jobstore.WORKER_LOCK_NAMESPACE, idle_baton.BATON_NAMESPACE]
    assert len(set(spaces)) == len(spaces), spaces


@pytest.mark.parametrize("order", ["highest_first", "lowest_first"])
def test_a_models_next_job_follows_the_claim_order(database_url, conn, others, order):
    queue_workflows.configure(database_url=database_url, claim_order=order)
    low_a, high_a, low_b = (node_queue.enqueue_node_job(name, "gpu", node_module="qw_test_nodes", required_model=m, priority=p)["id"]
                            for name, m, p in (("low-a", "A", 1), ("high-a", "A", 5), ("low-b", "B", 1)))
    others("w-b", 995, loaded=("B",))
    first, second = claim(loaded=("A",))["id"], claim(loaded=("A",))["id"]
    assert (first, second) == ((high_a, low_a) if order == "highest_first" else (low_a, high_a))
    assert claim(loaded=("A",)) is None, f"B's one job ({low_b}) stays with its warm holder"
