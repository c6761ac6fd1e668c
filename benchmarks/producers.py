"""Concurrent producers, one job per transaction: enqueue rate with the ready trigger vs without (pgbench), and wake latency.

Rate: Postgres' own `pgbench` runs the engine's `enqueue_ingest_job` statement (jobs.sql, verbatim;
its bind parameters become pgbench variables holding what `enqueue_ingest_job("noop", "fetch",
reason="bench")` binds), one job per transaction, `-M prepared`, with 1, 8 and 32 clients for a
fixed time. Four configurations run interleaved (ABCD ABCD ...) per client count, on the same
table truncated and checkpointed before each pass:

  quiet      as shipped, no worker waiting: the common case under load (every worker busy)
  waiting    as shipped, a session holding the queue's idle baton and LISTENing, as an idle
             worker does: every enqueue NOTIFYs (the worst case)
  no ready   the ready trigger (`ingest_jobs_ready_on_insert`, the only one that can NOTIFY on an
             insert) disabled: the issue's "same inserts with no trigger at all" baseline
  ready only the tenants trigger (`ingest_jobs_tenants_inserted`, fair-share bookkeeping) disabled,
             the ready trigger on: what the ready trigger alone costs against `no user`
  no user    every user trigger on ingest_jobs disabled: the issue's words taken literally

Each ratio is taken within one round (adjacent passes), then the median and range of the rounds.
pgbench replaces the earlier Python producer processes: 32 of them saturated two cores at
250-350 jobs/s, so their spread hid anything a trigger costs; pgbench is a light C client that
drives the same statement at the server's commit rate.

Wake latency (producer_wake.py): from the producer's just-before-COMMIT to an idle real worker's
job starting, against a bare INSERT + NOTIFY -> listener on the same clock, and that bare path plus
one claim-sized transaction.

    python benchmarks/producers.py [--seconds 5] [--clients 1,8,32] [--repeats 5] [--samples 200]
        [--min-ratio 0.9] [--out FILE] [--quick]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import common
import producer_wake
import psycopg
from common import Procs, percentile

from queue_workflows.common import sqlfile

_JOBS = sqlfile.load("queue_workflows", "jobs.sql")

READY_TRIGGER = "ingest_jobs_ready_on_insert"
TENANTS_TRIGGER = "ingest_jobs_tenants_inserted"
CONFIGS = ("quiet", "waiting", "no ready", "ready only", "no user")
RESULTS = common.BENCH_DIR / "results"
INSERT_TRIGGERS = ("SELECT tgname FROM pg_trigger WHERE tgrelid = 'ingest_jobs'::regclass AND NOT tgisinternal "
                   "AND tgtype & 4 = 4 ORDER BY tgname")  # TRIGGER_TYPE_INSERT


def pgbench_binary() -> str | None:
    """pgserver's own pgbench (the server's version), else one on PATH."""
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    return shutil.which("pgbench")


def enqueue_script() -> tuple[str, list[str]]:
    """The pgbench script (the engine's enqueue statement) and its -D variables."""
    from queue_workflows import node_queue

    statement = _JOBS["enqueue_ingest_job"]
    params = {**node_queue._ingest_params("noop", "fetch", reason="bench"), "trace_context": None}  # what enqueue_ingest_job binds, tracing off
    defines: list[str] = []

    def variable(match: re.Match[str]) -> str:
        value = params[match.group(1)]
        if value is None:
            return "NULL"  # pgbench variables cannot hold NULL
        text = json.dumps(value.obj) if hasattr(value, "obj") else str(value)
        defines.extend(["-D", f"{match.group(1)}={text}"])
        return f":{match.group(1)}"

    return re.sub(r"%\((\w+)\)s", variable, statement) + ";\n", defines


class Listener:
    """A LISTEN on the queue's channel, counting NOTIFYs; with `baton`, it holds the idle baton as an idle worker does."""

    def __init__(self, url: str, *, baton: bool) -> None:
        from queue_workflows.worker.idle_baton import BATON_NAMESPACE

        self.conn = psycopg.connect(url, autocommit=True)
        if baton and not self.conn.execute("SELECT qw_take_idle_baton(%s, 'fetch', 1000)", (BATON_NAMESPACE,)).fetchone()[0]:  # type: ignore[index]
            raise RuntimeError("could not take the idle baton of 'fetch'")
        self.conn.execute("LISTEN qw_ready_fetch")
        self.heard = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.heard += sum(1 for _ in self.conn.notifies(timeout=0.2))

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        self.heard += sum(1 for _ in self.conn.notifies(timeout=0.5))
        self.conn.close()
        return self.heard


def one_pass(binary: str, url: str, script: str, defines: list[str], config: str, clients: int, seconds: float) -> dict[str, float]:
    """One pgbench pass in `config`: its tps and the share of its transactions that sent a NOTIFY."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE ingest_jobs RESTART IDENTITY")
        conn.execute("ALTER TABLE ingest_jobs ENABLE TRIGGER USER")
        if config == "no ready":
            conn.execute(f"ALTER TABLE ingest_jobs DISABLE TRIGGER {READY_TRIGGER}")
        elif config == "ready only":
            conn.execute(f"ALTER TABLE ingest_jobs DISABLE TRIGGER {TENANTS_TRIGGER}")
        elif config == "no user":
            conn.execute("ALTER TABLE ingest_jobs DISABLE TRIGGER USER")
        conn.execute("CHECKPOINT")  # each pass starts from the same WAL state
    listener = Listener(url, baton=config == "waiting")
    try:
        argv = [binary, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)),
                "-T", str(max(1, round(seconds))), "-f", script, *defines, url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    finally:
        heard = listener.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE ingest_jobs ENABLE TRIGGER USER")
            rows = conn.execute("SELECT count(*) FROM ingest_jobs").fetchone()[0]  # type: ignore[index]
    tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", done.stdout, re.MULTILINE)
    processed = re.search(r"^number of transactions actually processed: (\d+)", done.stdout, re.MULTILINE)
    if done.returncode != 0 or tps is None or processed is None:
        raise RuntimeError(f"pgbench failed (exit {done.returncode}): {(done.stderr or done.stdout)[-800:]}")
    if not int(processed.group(1)) <= rows <= int(processed.group(1)) + clients:
        raise RuntimeError(f"pgbench reported {processed.group(1)} transactions but the table holds {rows} jobs")
    return {"tps": float(tps.group(1)), "jobs": rows, "notify_share": heard / max(1, rows)}


def rates(url: str, binary: str, clients: list[int], seconds: float, repeats: int) -> dict[int, list[dict[str, dict[str, float]]]]:
    """For each client count, `repeats` rounds of one pass per configuration, interleaved."""
    script_text, defines = enqueue_script()
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="qwbench-enqueue-", delete=False) as f:
        f.write(script_text)
    try:
        out: dict[int, list[dict[str, dict[str, float]]]] = {}
        for n in clients:
            out[n] = []
            for _ in range(repeats):
                out[n].append({config: one_pass(binary, url, f.name, defines, config, n, seconds) for config in CONFIGS})
            print(f"   {n} client(s), tps per round (" + " / ".join(CONFIGS) + "): "
                  + ", ".join(" / ".join(f"{r[c]['tps']:,.0f}" for c in CONFIGS) for r in out[n]), flush=True)
        return out
    finally:
        os.unlink(f.name)


def ratio_stats(rounds: list[dict[str, dict[str, float]]], top: str, base: str) -> tuple[float, float, float]:
    values = sorted(r[top]["tps"] / r[base]["tps"] for r in rounds)
    return common.median(values), values[0], values[-1]


def ms(v: float) -> str:
    return f"{v * 1000:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="seconds per pgbench pass (default 5; 2 with --quick)")
    parser.add_argument("--clients", default=None, help="comma separated client counts (default 1,8,32; 1,32 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved rounds per client count, medians reported (default 5; 1 with --quick)")
    parser.add_argument("--samples", type=int, default=None, help="wake-latency samples per path (default 200; 30 with --quick)")
    parser.add_argument("--min-ratio", type=float, default=None,
                        help="exit 1 when quiet / no-ready-trigger falls below this at any client count (default 0.9; 0.5 with --quick);"
                        " it also exits 1 when a quiet pass sent any NOTIFY")
    parser.add_argument("--out", default=None, help="results file to append this run to (default benchmarks/results/producers-DATE.json; none with --quick)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    clients = [int(c) for c in (args.clients or ("1,32" if args.quick else "1,8,32")).split(",")]
    repeats = args.repeats or (1 if args.quick else 5)
    samples = args.samples or (30 if args.quick else 200)
    min_ratio = args.min_ratio if args.min_ratio is not None else (0.5 if args.quick else 0.9)
    out = args.out or (None if args.quick else str(RESULTS / f"producers-{time.strftime('%Y-%m-%d')}.json"))
    binary = pgbench_binary()
    if binary is None:
        print("== producers: skipped, no pgbench binary (pgserver's or on PATH) ==")
        return 0

    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"producers: 1 job per transaction, pgbench {seconds:.0f} s per pass x {repeats}; wake latency, {samples} jobs", args, server_url)
        print(f"   load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {binary}", flush=True)
        url = common.qw_database(server_url)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                triggers = [r[0] for r in conn.execute(INSERT_TRIGGERS).fetchall()]
            print(f"   insert triggers on ingest_jobs: {', '.join(triggers)}; 'no ready' disables {READY_TRIGGER},"
                  f" 'ready only' {TENANTS_TRIGGER}, 'no user' all of them", flush=True)
            measured = rates(url, binary, clients, seconds, repeats)
        finally:
            common.drop_database(server_url, url)
        wakes, note = producer_wake.measure(server_url, procs, samples, 10.0 if args.quick else 120.0)
    load = os.getloadavg()

    rows, failures, summary = [], [], {}
    for n, rounds in measured.items():
        quiet, waiting = (ratio_stats(rounds, c, "no ready") for c in ("quiet", "waiting"))
        ready_only, q_user = (ratio_stats(rounds, c, "no user") for c in ("ready only", "quiet"))
        tps = {c: common.median([r[c]["tps"] for r in rounds]) for c in CONFIGS}
        notify = {c: common.median([r[c]["notify_share"] for r in rounds]) for c in ("quiet", "waiting")}
        rows.append([n, *(f"{tps[c]:,.0f}" for c in CONFIGS), f"{quiet[0]:.2f}x ({quiet[1]:.2f}-{quiet[2]:.2f})",
                     f"{waiting[0]:.2f}x ({waiting[1]:.2f}-{waiting[2]:.2f})", f"{ready_only[0]:.2f}x ({ready_only[1]:.2f}-{ready_only[2]:.2f})",
                     f"{q_user[0]:.2f}x ({q_user[1]:.2f}-{q_user[2]:.2f})",
                     f"{notify['quiet']:.0%} / {notify['waiting']:.0%}"])
        summary[n] = {"tps": tps, "quiet/no ready": quiet, "waiting/no ready": waiting, "ready only/no user": ready_only,
                      "quiet/no user": q_user, "notify_share": notify}
        if notify["quiet"] > 0:  # deterministic, unlike the rates on a shared host
            failures.append(f"{n} client(s): the quiet passes sent {notify['quiet']:.2f} NOTIFY per job, with no worker waiting (expected none)")
        if quiet[0] < min_ratio:
            failures.append(f"{n} client(s): quiet / no-ready-trigger {quiet[0]:.2f}x (rounds {quiet[1]:.2f}-{quiet[2]:.2f}) < --min-ratio {min_ratio}")
    print()
    common.print_table(["clients", *(f"{c} tps" for c in CONFIGS), "quiet / no ready", "waiting / no ready", "ready only / no user",
                        "quiet / no user", "NOTIFY quiet / waiting"], rows)
    wake = {name: (percentile(v, 50), percentile(v, 99), len(v)) for name, v in wakes.items()}
    print()
    common.print_table(["wake-up, from the producer's COMMIT", "n", "p50 ms", "p99 ms", "p50 / bare NOTIFY", "p50 / bare + claim", "note"], [
        ["idle worker: job claimed, its code started", wake["worker"][2], ms(wake["worker"][0]), ms(wake["worker"][1]),
         common.ratio(wake["worker"][0], wake["bare"][0]), common.ratio(wake["worker"][0], wake["bare + claim"][0]), note],
        ["bare INSERT + NOTIFY -> listener", wake["bare"][2], ms(wake["bare"][0]), ms(wake["bare"][1]), "1.00x", "-", "floor"],
        ["bare + one claim-sized transaction", wake["bare + claim"][2], ms(wake["bare + claim"][0]), ms(wake["bare + claim"][1]),
         common.ratio(wake["bare + claim"][0], wake["bare"][0]), "1.00x", "floor with the claim"],
        ["of the idle worker's: to its claim's start", wake[producer_wake.TO_CLAIM][2], ms(wake[producer_wake.TO_CLAIM][0]),
         ms(wake[producer_wake.TO_CLAIM][1]), common.ratio(wake[producer_wake.TO_CLAIM][0], wake["bare"][0]), "-",
         "started_at; host wall clock" if not args.database_url else "started_at; server's wall clock"],
    ])
    print(f"   tps: median of {repeats} interleaved round(s) of {seconds:.0f} s pgbench passes (-M prepared, -j up to {os.cpu_count()});"
          " ratios: median (range) of the rounds' ratios; NOTIFY share: NOTIFYs heard per job enqueued.")
    print("   quiet: as shipped, no worker waiting; waiting: as shipped, the queue's idle baton held (every enqueue notifies);")
    print(f"   no ready: {READY_TRIGGER} disabled; ready only: {TENANTS_TRIGGER} disabled; no user: every user trigger on ingest_jobs disabled.")
    print(f"   targets: quiet / no ready >= {min_ratio:.2f}x at every client count (--min-ratio); wake p50 <= 1.3x the bare NOTIFY.")
    print(f"   load average after the run {' '.join(f'{x:.2f}' for x in load)}")
    if out:
        record = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": seconds, "repeats": repeats, "cores": os.cpu_count(),
                  "load_average_after": load, "insert_triggers": triggers, "passes": measured, "summary": summary,
                  "wake_ms": {k: {"p50": v[0] * 1000, "p99": v[1] * 1000, "n": v[2]} for k, v in wake.items()}}
        path = Path(out)
        doc = json.loads(path.read_text()) if path.exists() else {"benchmark": "benchmarks/producers.py", "runs": []}
        doc["runs"].append(record)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"   run appended to {out}")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
