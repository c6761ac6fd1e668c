"""Tracing's cost on the claim path (docs/tracing.md): a one-job worker draining N no-op jobs, before tracing existed, with it off, and on.

- `before`: the engine of the commit before tracing came (`git archive` of the parent of the
  commit that added common/tracing.py, or `--before REV`), on a database its own migrations built;
- `off`: this tree, no OTEL_* variable (the default);
- `on`: this tree with OTEL_EXPORTER_OTLP_ENDPOINT at a local OTLP/HTTP receiver, every job carrying
  a trace context, so each job costs a claim span and a run span, batched and exported.

Every mode runs on the same Postgres, in rounds that alternate the modes; a round enqueues N jobs
by SQL, starts one worker process with `--max-jobs N` and reads its rate from the jobs' own
`finished_at` (first to last), so process start and the SDK's import are not counted. Ratios
are against `before`, measured in the same run.

    python benchmarks/tracing.py [--quick] [--jobs N] [--rounds R] [--before REV]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import Any

import common
import psycopg

ROOT = common.BENCH_DIR.parent
RESULTS = common.BENCH_DIR / "results" / "tracing.json"
MODES = ("before", "off", "on")
WORKER = "import bench_app; from queue_workflows.claim_worker import ClaimWorker; ClaimWorker('fetch', max_jobs=int(__import__('sys').argv[1])).run_forever()"
ENQUEUE = ("INSERT INTO ingest_jobs (task_name, queue, args, reason) "
           "SELECT 'noop', 'fetch', '{}'::jsonb, 'bench' FROM generate_series(1, %s)")
ENQUEUE_TRACED = ("INSERT INTO ingest_jobs (task_name, queue, args, reason, trace_context) "
                  "SELECT 'noop', 'fetch', '{}'::jsonb, 'bench', "
                  "jsonb_build_object('traceparent', '00-' || md5(i::text) || '-' || left(md5('span' || i), 16) || '-01') "
                  "FROM generate_series(1, %s) AS i")
RATE = "SELECT (count(*) - 1) / extract(epoch FROM max(finished_at) - min(finished_at)) FROM ingest_jobs WHERE status = 'completed'"


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes every export and answers 200 (what a collector costs is not the worker's)."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


HOOKS = """
import sys, timeit
from queue_workflows.common import tracing
from queue_workflows.jobrow import IngestJob, JobStatus
job = IngestJob(id=1, queue="fetch", status=JobStatus.RUNNING, priority=0, attempts=1, max_attempts=3, task_name="noop", args={},
                reason="bench", trace_context={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})

def one_job():  # what the one-job worker's path calls per job (worker/claim.py, executor.py)
    started = tracing.clock()
    claim = tracing.claim_span(job, started, "w", "h")
    with tracing.run_span(job, "w", "h", claim) as span:
        tracing.job_trace_id(job)
        span.outcome("completed")

one_job()
n = int(sys.argv[1])
print(min(timeit.repeat(one_job, number=n, repeat=5)) / n * 1e9)
"""


def hook_cost(mode: str, endpoint: str, n: int) -> float:
    """The tracing hooks of one job's claim and run, alone (no database): ns per job, best of 5."""
    env = common.child_env(None, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="200") if mode == "on" else common.child_env(None)
    if mode != "on":
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", HOOKS, str(n)], env=env, capture_output=True, text=True, check=True, cwd=common.BENCH_DIR)
    return float(done.stdout.split()[-1])


def before_tree(rev: str | None, into: Path) -> Path | None:
    """The engine as of `rev` (default: the parent of the commit that added tracing), unpacked under `into`; None without git history."""
    try:
        if rev is None:
            added = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--",
                                    "engine/queue_workflows/common/tracing.py"], capture_output=True, text=True, check=True).stdout.split()
            if not added:
                return None
            rev = f"{added[-1]}^"
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "engine"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "engine"


def migrated(server_url: str, engine: Path | None) -> str:
    """A database migrated by this tree, or by `engine` (another tree's) in a process of its own."""
    if engine is None:
        return common.qw_database(server_url)
    from queue_workflows import testing

    url = testing.create_database(server_url, "qwbench_before")
    env = common.child_env(url, PYTHONPATH=f"{engine}:{common.BENCH_DIR}")
    subprocess.run([sys.executable, "-c", "from queue_workflows import db; db.bootstrap()"], env=env, check=True, cwd=common.BENCH_DIR)
    return url


def drain(procs: common.Procs, url: str, mode: str, jobs: int, engine: Path | None, endpoint: str) -> float:
    """One round: N jobs queued, one worker drains them; its jobs/s."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE ingest_jobs")
        conn.execute(ENQUEUE_TRACED if mode == "on" else ENQUEUE, (jobs,))
    extra = {"QW_POLL_SECONDS": "0.2"}
    if engine is not None:
        extra["PYTHONPATH"] = f"{common.BENCH_DIR}:{engine}"
    if mode == "on":
        extra.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="qw-bench", OTEL_BSP_SCHEDULE_DELAY="200")
    env = common.qw_env(url, **extra)
    if mode != "on":
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    worker = procs.spawn(f"worker-{mode}", [sys.executable, "-c", WORKER, str(jobs)], env)
    if worker.wait(timeout=600) != 0:
        raise SystemExit(f"the {mode} worker failed:\n{procs.tail(worker, chars=3000)}")
    return float(common.scalar(url, RATE))


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per round (default 3000; --quick 300)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every mode (default 3; --quick 1)")
    parser.add_argument("--before", default=None, help="the git revision whose engine is the baseline (default: before tracing)")
    args = parser.parse_args(argv)
    jobs = args.jobs or (300 if args.quick else 3000)
    rounds = args.rounds or (1 if args.quick else 3)
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    with common.postgres_server(args.database_url) as server_url, tempfile.TemporaryDirectory(prefix="qwbench-before-") as tmp, \
            common.Procs(keep_logs=args.keep_logs) as procs:
        common.banner("tracing: a one-job worker's claim path, before tracing / off / on", args, server_url)
        engine = before_tree(args.before, Path(tmp))
        modes = MODES if engine is not None else MODES[1:]
        if engine is None:
            print("   (no git history here: the `before` baseline is left out; ratios are against `off`)")
        urls = {"before": migrated(server_url, engine) if engine is not None else "", "off": migrated(server_url, None)}
        urls["on"] = urls["off"]
        rates: dict[str, list[float]] = {m: [] for m in modes}
        try:
            for mode in modes:  # a warm-up round each, not counted: the first drain on a database runs cold
                drain(procs, urls[mode], mode, max(50, jobs // 10), engine if mode == "before" else None, endpoint)
            for r in range(rounds):
                for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # each mode takes each place in turn
                    rates[mode].append(drain(procs, urls[mode], mode, jobs, engine if mode == "before" else None, endpoint))
        finally:
            for url in {urls["before"], urls["off"]} - {""}:
                common.drop_database(server_url, url)
        hooks = {mode: hook_cost(mode, endpoint, 2000 if args.quick else 20000) for mode in ("off", "on")}
    sink.shutdown()
    base = common.median(rates[modes[0]])
    mean = {m: sum(rates[m]) / len(rates[m]) for m in modes}
    rows = [[m, f"{common.median(rates[m]):.0f}", f"{mean[m]:.0f}", " ".join(f"{r:.0f}" for r in rates[m]),
             common.ratio(common.median(rates[m]), base), common.ratio(mean[m], mean[modes[0]])] for m in modes]
    print(f"   {jobs} no-op jobs per round, {rounds} round(s), one one-job worker on `fetch`")
    common.print_table(["mode", "jobs/s (median)", "(mean)", "each round", f"median vs {modes[0]}", "mean vs"], rows)
    per_job_ns = 1e9 / common.median(rates["off"])
    print(f"   the hooks alone, per job (no database): off {hooks['off']:.0f} ns ({hooks['off'] / per_job_ns:.3%} of a job at the off rate),"
          f" on {hooks['on'] / 1000:.1f} us ({hooks['on'] / per_job_ns:.1%})")
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"jobs": jobs, "rounds": rounds, "rates": rates, "hook_ns_per_job": hooks}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
