"""Run every benchmark in turn: throughput, latency, recovery.

Each runs as its own process (with its own private pgserver unless --database-url is given)
and prints its own results; this prints a one-line summary of how each run ended.

    python benchmarks/run_all.py [--quick] [--database-url DSN] [--only throughput,latency]
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import common

SCRIPTS = ("throughput", "latency", "recovery", "claim_backlog", "worker_control", "dag")


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SCRIPTS), help=f"comma separated subset of {', '.join(SCRIPTS)}")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SCRIPTS))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    passthrough: list[str] = []
    if args.quick:
        passthrough.append("--quick")
    if args.database_url:
        passthrough.append(f"--database-url={args.database_url}")
    if args.keep_logs:
        passthrough.append("--keep-logs")

    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    summary: list[tuple[str, int, float]] = []
    for name in chosen:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, str(common.BENCH_DIR / f"{name}.py"), *passthrough])
        try:
            rc = child.wait()
        finally:
            if child.poll() is None:  # we were interrupted: let the child clean up its server
                child.terminate()
                child.wait(timeout=30)
        summary.append((name, rc, time.monotonic() - started))
        print(flush=True)

    print("== run_all ==")
    for name, rc, seconds in summary:
        print(f"   {name:<11} {'ok' if rc == 0 else f'FAILED (exit {rc})':<16} {seconds:6.1f}s")
    return 0 if all(rc == 0 for _, rc, _ in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
