"""The `ha` profile (deploy/compose.ha.yaml, docs/ha.md) survives repeated losses of its primary, and a planned switchover.

etcd, two Postgres nodes under Patroni (one a synchronous standby), the migrations, an
orchestrator, a scheduler on a fast clock, two ingest workers and a cpu worker come up under a
project of their own. A steady load of enqueues and DAG runs goes on throughout, each
acknowledgement recorded. Three times the primary's container is killed (SIGKILL, as a dead box)
and started again; once the primary is handed over with `patronictl switchover`. After each,
the old primary must come back as a streaming synchronous standby by itself (pg_rewind when it
diverged).
Then: every acknowledged job, DAG node and schedule slot ran, no two executions of one overlapped,
no slot is missing beyond the catch-up policy, and the leader leads again. The rows of the
failure matrix are written to $QW_FAILURE_ROWS_DIR/ha.json (docs/failure-matrix.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_support import ROOT, engine_problem, poll, rows, rows_or_none, write_secrets
from ha_matrix import Outcome, Trial, executions, tally, write
from ha_support import NODES, HaStack, Load, build_ha_images, commit_latency

import queue_workflows
from queue_workflows import node_queue

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PROBE_APP = Path(__file__).resolve().parent / "ha_probe"
FAULTS = ("kill", "kill", "kill", "switchover")
JOB_SECONDS = 0.6
LONG_JOB_SECONDS = 14.0  # longer than a failover, shorter than the 30 s lease
SCHEDULE_SCALE = 12  # a minute's slot every 5 s
ROWS_DIR = Path(os.environ.get("QW_FAILURE_ROWS_DIR") or ROOT / "test-artifacts" / "failure-matrix")


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaStack]:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    build_ha_images()
    secrets = write_secrets(tmp_path_factory.mktemp("ha-secrets"), extra=("replication_password",))
    probe_dir = tmp_path_factory.mktemp("ha-probe")
    probe_dir.chmod(0o777)  # the workers' user writes the executions log there
    stack = HaStack(secrets, probe_dir, SCHEDULE_SCALE)
    started = time.monotonic()
    try:
        up = ("up", "-d", "--wait", "--scale", "ingest-worker=2", "etcd", "pg1", "pg2", "migrate", "orchestrator", "scheduler",
              "ingest-worker", "cpu-worker")
        first = stack.compose(*up, check=False, timeout=600)
        if first.returncode != 0 and "is unhealthy" in first.stderr:
            # --wait gives up at a worker's first failed health checks, which a loaded machine's slow
            # base backup of the standby can cause; the worker recovers once Postgres answers.
            print(f"\nretrying up after: {first.stderr.strip().splitlines()[-1]}")
            stack.compose(*up, timeout=600)
        elif first.returncode != 0:
            raise AssertionError(f"docker compose up failed ({first.returncode}):\n{first.stdout}\n{first.stderr}")
        print(f"\nha profile up: {time.monotonic() - started:.1f}s")
        yield stack
    finally:
        # The engine's own lines (reclaims, reconnects, discarded results), not each retry's.
        logs = stack.compose("logs", "--no-color", "orchestrator", "scheduler", "ingest-worker", "cpu-worker", "pg1", "pg2",
                             check=False).stdout.splitlines()
        print("\n".join(line for line in logs if "session is read-only" not in line)[-12000:])
        stack.compose("down", "-v", "--remove-orphans", "--timeout", "10", check=False)


def fault(ha: HaStack, load: Load, kind: str, outcome: Outcome) -> None:
    """One trial: the primary lost (or handed over) under load, measured on the host's wall clock, which the containers and Postgres share."""
    first = poll("a primary", ha.primary, 60)
    standby = next(node for node in NODES if node != first)
    long_job = node_queue.enqueue_ingest_job("ha.probe", "fetch", {"n": f"long-{len(outcome.trials)}", "seconds": LONG_JOB_SECONDS},
                                             reason="ha-e2e")
    load.acked[f"long-{len(outcome.trials)}"] = (int(long_job["id"]), time.time())
    poll("the long job running", lambda: rows(ha.url(), "SELECT 1 FROM ingest_jobs_all WHERE id = %s AND status = 'running'",
                                              (long_job["id"],)), 60, 0.05)
    acked_before = len(load.ack_times())
    poll("acknowledgements before the fault", lambda: len(load.ack_times()) >= acked_before + 4, 60, 0.05)
    if kind == "kill":
        subprocess.run(["docker", "kill", ha.container(first)], check=True, capture_output=True, timeout=60)
        fault_at = time.time()  # once the kill returned: nothing commits on the old primary after this
    else:
        fault_at = time.time()
        ha.patronictl("switchover", "--leader", first, "--candidate", standby, "--force", on=standby, check=True)
    trial = Trial(kind, fault_at)
    poll(f"{standby} promoted", lambda: ha.primary() == standby, 90, 0.1)
    trial.promoted_s = time.time() - fault_at
    done = poll("a completion on the new primary", lambda: rows_or_none(ha.node_url(standby),
                "SELECT extract(epoch FROM min(finished_at))::float AS t FROM ingest_jobs_all"
                " WHERE status = 'completed' AND finished_at > to_timestamp(%s) HAVING count(*) > 0",
                (fault_at + trial.promoted_s,)), 120, 0.1)
    trial.first_completion_s = done[0]["t"] - fault_at
    poll("enqueues acknowledged by the new primary", lambda: sum(t > fault_at + trial.promoted_s for t in load.ack_times()) >= 3, 60, 0.1)
    # The producers' gap: from the fault to the first acknowledgement after the longest pause around it.
    times = [t for t in load.ack_times() if t > fault_at - 5]
    gap_end = max(zip(times, times[1:]), key=lambda pair: pair[1] - pair[0])[1]
    trial.first_ack_s = max(0.0, gap_end - fault_at)
    if kind == "kill":
        subprocess.run(["docker", "start", ha.container(first)], check=True, capture_output=True, timeout=60)
    back = time.time()
    pair = poll(f"{first} back as a streaming synchronous standby (pg_rewind)", ha.healthy_pair, 120, 0.5)
    assert pair[standby]["Role"] == "Leader" and pair[first]["Role"] == "Sync Standby", pair
    trial.rejoined_s = time.time() - back
    outcome.trials.append(trial)
    print(f"{kind} of {first}: {standby} promoted {trial.promoted_s:.1f}s, first completion {trial.first_completion_s:.1f}s, "
          f"first acknowledged enqueue {trial.first_ack_s:.1f}s, {first} streaming again {trial.rejoined_s:.1f}s after its start "
          f"(TL {pair[standby].get('TL')})")


def schedule_gaps(ha: HaStack, outcome: Outcome) -> tuple[list[dict], list[datetime]]:
    """The schedule's slot rows, and each slot missing between the first and the last that fell due outside every outage.

    catch_up="latest" documents that only the latest slot due is ever considered: slots that fall
    due while the scheduler cannot write (from a fault to its first slot row on the new primary)
    collapse into the next one it writes. Any other gap is a slot lost.
    """
    slots = rows(ha.url("orchestrator"), "SELECT s.slot_time, s.kind, j.reason, extract(epoch FROM s.created_at)::float AS written"
                                         " FROM schedule_slots s JOIN ingest_jobs j ON j.id = s.job_id"
                                         " WHERE s.entry_name = 'ha-tick' ORDER BY s.slot_time")
    outages = [(t.fault_at, min((s["written"] for s in slots if s["written"] > t.fault_at), default=float("inf"))) for t in outcome.trials]
    origin = ha.schedule_origin
    unexplained = []
    for earlier, later in zip(slots, slots[1:]):
        for k in range(round((later["slot_time"] - earlier["slot_time"]).total_seconds() / 60) - 1):
            slot = earlier["slot_time"].timestamp() + 60 * (k + 1)
            due = origin + (slot - origin) / ha.schedule_scale  # on the host's clock
            if not any(start - 1 <= due <= end for start, end in outages):
                unexplained.append(datetime.fromtimestamp(slot, UTC))
    return slots, unexplained


def test_the_stack_follows_three_failovers_and_a_switchover_under_load(ha):
    queue_workflows.configure(database_url=ha.url(), ingest_queues=frozenset({"fetch", "load"}))
    sys.path.insert(0, str(PROBE_APP))
    import qw_ha_probe  # registers ha.probe and ha.step here too: enqueueing checks the task

    first = poll("a primary", ha.primary, 60)
    poll("a streaming synchronous standby", ha.healthy_pair, 60, 1)
    latency = commit_latency(ha.node_url(first))
    print(f"\ncommit latency (median of 200 each, interleaved): synchronous_commit=local {latency['local']:.2f} ms, "
          f"on (synchronous standby) {latency['on']:.2f} ms")
    leader_before = poll("a leader", lambda: rows_or_none(ha.url("orchestrator"),
                         "SELECT epoch, leader_id FROM qw_leadership WHERE lease_until > now()"), 60)
    load = Load(every=JOB_SECONDS / 2, job_seconds=JOB_SECONDS, dag=qw_ha_probe.dag())
    load.thread.start()
    outcome = Outcome(0, 0, 0)
    started = time.monotonic()
    for kind in FAULTS:
        fault(ha, load, kind, outcome)
    load.stop.set()
    load.thread.join(timeout=30)
    ids = [job for job, _ in load.acked.values()]
    run_ids = [run for run, _ in load.runs.values()]

    def all_done() -> bool:
        jobs = rows_or_none(ha.url(), "SELECT count(*) AS n FROM ingest_jobs_all WHERE id = ANY(%s) AND status = 'completed'", (ids,))
        runs = rows_or_none(ha.url(), "SELECT count(*) AS n FROM workflow_runs WHERE id = ANY(%s) AND status = 'completed'", (run_ids,))
        return bool(jobs and runs and jobs[0]["n"] == len(ids) and runs[0]["n"] == len(run_ids))

    try:
        poll("every acknowledged job and DAG run completed", all_done, 180, 0.5)
    except AssertionError:
        found = rows(ha.url(), "SELECT status, count(*) FROM ingest_jobs_all WHERE id = ANY(%s) GROUP BY 1", (ids,))
        dags = rows(ha.url(), "SELECT status, count(*) FROM workflow_runs WHERE id = ANY(%s) GROUP BY 1", (run_ids,))
        raise AssertionError(f"{len(ids)} jobs, {len(run_ids)} DAG runs acknowledged; on the primary: {found}, {dags}") from None
    slots, unexplained = schedule_gaps(ha, outcome)
    wanted = [*load.acked, *(f"{tag}/{step}" for tag in load.runs for step in qw_ha_probe.DAG_STEPS), *(s["reason"] for s in slots)]
    lost, doubled, reruns = tally(executions(ha.log), wanted)
    outcome.lost, outcome.doubled, outcome.reruns = len(lost), len(doubled), reruns
    path = write(outcome, ROWS_DIR)
    print(f"{len(FAULTS)} faults in {time.monotonic() - started:.1f}s; {len(load.acked)} jobs, {len(load.runs)} DAG runs, "
          f"{len(slots)} schedule slots ({sum(s['kind'] == 'catch_up' for s in slots)} catch-ups); {len(load.failures)} enqueues "
          f"refused ({sorted(set(load.failures))}); lost {len(lost)}, concurrent double runs {len(doubled)}, sequential re-runs "
          f"{reruns}; rows in {path}:\n{path.read_text()}")
    assert lost == [], f"acknowledged but never ran: {lost}"
    assert doubled == {}, f"two executions of one unit of work overlapped: {doubled}"
    assert len(slots) >= 8 and unexplained == [], f"schedule slots missing outside any failover: {unexplained}"
    dag_nodes = rows(ha.url(), "SELECT count(*) AS n FROM workflow_node_jobs_all WHERE run_id = ANY(%s) AND status = 'completed'", (run_ids,))
    assert dag_nodes[0]["n"] == len(run_ids) * len(qw_ha_probe.DAG_STEPS), dag_nodes
    leader_after = poll("a leader", lambda: rows_or_none(ha.url("orchestrator"),
                        "SELECT epoch, leader_id FROM qw_leadership WHERE lease_until > now()"), 60)
    assert leader_after[0]["epoch"] >= leader_before[0]["epoch"]
    beating = rows(ha.url("orchestrator"), "SELECT count(*) AS live FROM worker_heartbeats WHERE last_seen > now() - interval '30 seconds'")
    assert beating[0]["live"] >= 3, f"the workers are not beating on the last primary: {beating}"
