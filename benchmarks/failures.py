"""The failure matrix: each fault a cluster meets, injected N times under a steady load of jobs and DAG runs, with its recovery time, losses and double runs.

Real processes on one private Postgres (tests/support's restartable one): two orchestrators
(leader + standby), two claim workers on `fetch` and one on `cpu` (the DAG nodes), a probe
seat (a target worker that runs a fault's probe job, and a taker beside it) and a producer
process that enqueues plain jobs at --rate per second (through a real PgBouncer in transaction
mode when installed) and starts a three-node DAG run at --dag-rate per second, all through
the whole run. Each fault in turn (failure_faults.py) runs --trials times; afterwards the load
stops, everything drains, and per fault (over the jobs and runs created while its trials ran):

- recovery p50/p99: seconds on the database's clock, as each fault's `measures` says;
- lost: an acknowledged enqueue not `completed`, a job in the table not `completed`, a
  completed job whose code never ran, a DAG run that did not complete;
- concurrent double runs / sequential re-runs: from every execution's own log (failure_app.py:
  start, 0.1 s ticks, end): an execution beyond a job's first whose live span overlapped
  another's, or did not.

    python benchmarks/failures.py [--quick] [--faults kill_worker,frozen_worker] [--trials 5] [--out FILE]
    python benchmarks/failures.py --write-doc    # docs/failure-matrix.md from the newest results files

Partitions and the full disk need root (a network namespace, a tmpfs); skipped rows say why.
"""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import common
import failure_load
from failure_cluster import Cluster
from failure_faults import BY_NAME, FAULTS, Fault, FaultBroken

RESULTS = common.BENCH_DIR / "results"


def row_for(fault: Fault, trials: int, times: list[float], counts: dict[str, int], sees: str) -> dict[str, Any]:
    """One row of the matrix, in the schema docs/failure-matrix.md is rendered from (failure_matrix_doc.py)."""
    return {
        "fault": fault.name, "trials": trials, "recovery_measures": fault.measures,
        "recovery_p50_s": round(common.median(times), 3) if times else None,
        "recovery_p99_s": round(common.percentile(times, 99), 3) if times else None,
        "lost": counts["lost"], "concurrent_double_runs": counts["concurrent"], "sequential_reruns": counts["sequential"],
        "operator_sees": sees, "stage": "soak",
        "command": f"PYTHONPATH=engine:services:examples python benchmarks/failures.py --faults {fault.name} --trials {trials}",
    }


def operator_sees(fault: Fault, lines: list[tuple[str, str]], status: str | None, notes: list[str]) -> str:
    """The first line matching each of the fault's patterns (role: line), the `qw status` line, then what the trial noted."""
    seen = []
    for pattern in fault.sees:
        hit = next(((role, line) for role, line in lines if re.search(pattern, line)), None)
        if hit:
            seen.append(f"{hit[0]}: {hit[1][:300]}")
    if status:
        seen.append(f"qw status: {status}")
    seen += notes
    return " | ".join(seen) or "nothing: no process logged a warning"


def status_line(output: str) -> str | None:
    """The most telling line of `qw status`: a flagged worker if any, else the probe queue's, with the column names."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    flagged = next((line for line in lines if "DEAD" in line), None)
    if flagged:
        return flagged
    for i, line in enumerate(lines):
        if line.split()[:2] == ["ingest", "probe"]:
            header = next((h for h in reversed(lines[:i]) if h.split()[:1] == ["family"]), None)
            return " ".join(f"{k}={v}" for k, v in zip(header.split(), line.split())) if header else line
    return None


def run_fault(cluster: Cluster, fault: Fault, trials: int) -> tuple[list[float], str, int, str | None]:
    """(recovery times, what an operator sees, trials run, what broke): a broken trial ends the fault's trials, not the matrix."""
    times: list[float] = []
    sees = ""
    for n in range(trials):
        marks = cluster.log_marks()
        cluster.notes.clear()
        cluster.more_trials = n + 1 < trials
        try:
            took = fault.trial(cluster)
        except FaultBroken as exc:
            print(f"      {fault.name} trial {n + 1}: BROKEN {exc}", flush=True)
            return times, f"BROKEN: {exc} | {sees}" if sees else f"BROKEN: {exc}", n + 1, str(exc)
        if took is not None:
            times.append(took)
        print(f"      {fault.name} trial {n + 1}: " + (f"{took:.3f}s" if took is not None else "ok"), flush=True)
        if n == 0:
            status = cluster.qw_status().communicate(timeout=60)[0] if fault.status else None
            time.sleep(0.3)  # the lines logged just after the recovery (a reclaim's, a restored session's)
            sees = operator_sees(fault, cluster.lines_since(marks), status_line(status) if status else None, cluster.notes)
    return times, sees, trials, None


def drain(cluster: Cluster, timeout: float) -> None:
    def settled() -> bool:
        left = cluster.one("SELECT (SELECT count(*) FROM ingest_jobs WHERE status NOT IN ('completed', 'failed', 'cancelled'))"
                           " + (SELECT count(*) FROM workflow_runs WHERE status NOT IN ('completed', 'failed', 'cancelled'))")
        return left == 0

    from queue_workflows import testing

    try:
        testing.wait_until(settled, timeout=timeout, interval=0.25, what="the load to drain")
    except TimeoutError as exc:
        print(f"   {exc}: what is left counts as lost")


def account(cluster: Cluster, windows: list[tuple[Fault, datetime, float]]) -> dict[str, dict[str, int]]:
    """Per fault: lost, concurrent and sequential, over the jobs and runs created while its trials ran."""
    acked_jobs, acked_runs = failure_load.acknowledged(cluster.acked_log)
    execs = failure_load.executions(cluster.exec_log)
    jobs = cluster.sql(cluster.url, "SELECT args->>'key' AS key, status, created_at FROM ingest_jobs")
    runs = cluster.sql(cluster.url, "SELECT id, context->>'key' AS key, status, created_at, error FROM workflow_runs")
    starts = [start for _, start, _ in windows]

    def window(created: datetime) -> int:
        return max(0, sum(1 for start in starts if created >= start) - 1)

    counts = {fault.name: {"lost": 0, "concurrent": 0, "sequential": 0} for fault, _, _ in windows}
    keys: dict[str, set[str]] = {fault.name: set() for fault, _, _ in windows}
    for job in jobs:
        name = windows[window(job["created_at"])][0].name
        keys[name].add(job["key"])
        if job["status"] != "completed" or job["key"] not in execs:
            counts[name]["lost"] += 1
            print(f"   {name}: lost job {job['key']} ({job['status']}, {'ran' if job['key'] in execs else 'never ran'})")
    for run in runs:
        name = windows[window(run["created_at"])][0].name
        keys[name] |= {f"{run['key']}:{node}" for node in "abc"}
        if run["status"] != "completed":
            counts[name]["lost"] += 1
            print(f"   {name}: lost DAG run {run['id']} ({run['status']}, key {run['key']})")
    present_jobs, present_runs = {j["key"] for j in jobs}, {r["id"] for r in runs}
    missing = [k for k in acked_jobs if k not in present_jobs] + [k for k, i in acked_runs.items() if i not in present_runs]
    if missing:  # acknowledged, yet not in the table at all: charged to the last fault (no created_at to place it by)
        print(f"   acknowledged but missing: {missing[:20]}")
        counts[windows[-1][0].name]["lost"] += len(missing)
    for name, found in keys.items():
        counts[name]["concurrent"], counts[name]["sequential"] = failure_load.tally(found, execs)
        for key in sorted(found):
            if failure_load.double_runs(execs.get(key, []))[0]:
                print(f"   {name}: concurrent executions of {key}: {execs[key]}")
    return counts


def machine() -> str:
    import psutil

    return (f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, {platform.platform()}, "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(f.name for f in FAULTS), help=f"comma separated subset of {', '.join(BY_NAME)}")
    parser.add_argument("--trials", type=int, default=None, help="trials per fault (default 5; 2 with --quick)")
    parser.add_argument("--lease", type=float, default=3.0, help="QW_LEASE_SECONDS of every worker (renewed every lease/6)")
    parser.add_argument("--rate", type=float, default=20.0, help="plain jobs enqueued per second")
    parser.add_argument("--dag-rate", type=float, default=1.0, help="DAG runs started per second")
    parser.add_argument("--out", default=None, help="results file (default benchmarks/results/failures-local-DATE.json; none with --quick)")
    parser.add_argument("--write-doc", action="store_true", help="only render docs/failure-matrix.md from the newest results files")
    args = parser.parse_args(argv)
    if args.write_doc:
        import failure_matrix_doc

        print(f"wrote {failure_matrix_doc.write()}")
        return 0
    chosen = [name.strip() for name in args.faults.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BY_NAME]
    if unknown or not chosen:
        parser.error(f"unknown fault(s) {unknown or '(none given)'}; choose from {', '.join(BY_NAME)}")
    trials = args.trials or (2 if args.quick else 5)
    out = args.out or (None if args.quick else str(RESULTS / f"failures-local-{time.strftime('%Y-%m-%d')}.json"))
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    started = time.monotonic()
    cluster = Cluster(args.database_url, lease=args.lease, rate=args.rate, dag_rate=args.dag_rate, keep_logs=args.keep_logs)
    rows, windows, broken = [], [], []
    try:
        version = cluster.one("SHOW server_version")
        print(f"== failure matrix: {len(chosen)} faults x {trials} trials, {args.rate:g} jobs/s + {args.dag_rate:g} DAG runs/s, "
              f"lease {args.lease:g}s ==\n   {time.strftime('%Y-%m-%d %H:%M:%S')}  {machine()}  Postgres {version}"
              f"{'  [--quick]' if args.quick else ''}", flush=True)
        import queue_workflows

        queue_workflows.configure(database_url=cluster.url, ingest_queues=frozenset({"fetch", "probe"}),
                                  node_packages=frozenset({"failure_app"}))
        import failure_app  # noqa: F401 - registers `probe`, so enqueue validates it

        cluster.start()
        results: dict[str, tuple[list[float], str, int]] = {}
        for name in chosen:
            fault = BY_NAME[name]
            why = cluster.skips.get(fault.needs) if fault.needs else None
            windows.append((fault, cluster.db_now(), time.monotonic()))
            if why:
                print(f"   {name}: skipped ({why})", flush=True)
                results[name] = ([], f"skipped: {why}", 0)
                continue
            print(f"   {name}: {fault.what}", flush=True)
            times, sees, done, why_broken = run_fault(cluster, fault, trials)
            if why_broken:
                broken.append(f"{name}: {why_broken}")
            results[name] = (times, sees, done)
        cluster.stop_producer()
        drain(cluster, timeout=120)
        counts = account(cluster, windows)
        for fault, _, _ in windows:
            if fault.name in results:
                times, sees, done = results[fault.name]
                rows.append(row_for(fault, done, times, counts[fault.name], sees))
        acked_jobs, acked_runs = failure_load.acknowledged(cluster.acked_log)
        load = {"jobs_per_s": args.rate, "dag_runs_per_s": args.dag_rate, "dag": "a -> (b, c), three no-op nodes",
                "orchestrators": 2, "load_workers": "2 on fetch, 1 on cpu (DAG nodes)",
                "probe_seat": "a target worker per trial (started parked during the trial before) and a taker", "lease_s": args.lease, "renew_s": round(args.lease / 6, 3),
                "reclaim_sweep_s": 0.25, "producer": "through PgBouncer (transaction mode)" if cluster.bouncer else "direct",
                "acknowledged_jobs": len(acked_jobs), "acknowledged_runs": len(acked_runs),
                "wall_s": round(time.monotonic() - started, 1), "quick": bool(args.quick)}
    finally:
        cluster.close()
    _report(rows, load)
    if out:
        doc = {"date": time.strftime("%Y-%m-%d"), "machine": f"{machine()}, Postgres {version}", "stage": "soak", "load": load, "rows": rows}
        Path(out).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"results written to {out}")
    bad = [r["fault"] for r in rows if r["lost"] or r["concurrent_double_runs"]]
    if broken or bad:
        print(f"FAILED: {'; '.join(broken)} {'lost or concurrent double runs in ' + ', '.join(bad) if bad else ''}".strip())
        return 1
    return 0


def _report(rows: list[dict[str, Any]], load: dict[str, Any]) -> None:
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    common.print_table(["fault", "trials", "p50 s", "p99 s", "lost", "concurrent", "re-runs"],
                       [[r["fault"], r["trials"], fmt(r["recovery_p50_s"]), fmt(r["recovery_p99_s"]), r["lost"],
                         r["concurrent_double_runs"], r["sequential_reruns"]] for r in rows])
    print(f"   load: {load['acknowledged_jobs']} jobs and {load['acknowledged_runs']} DAG runs acknowledged in {load['wall_s']:.0f}s")
    for r in rows:
        print(f"   {r['fault']}: {r['operator_sees']}")


if __name__ == "__main__":
    raise SystemExit(main())
