"""Run every benchmark in turn, and optionally write the whole output to a results file.

Each runs as its own process (with its own private pgserver unless --database-url is given)
and prints its own results; this prints a one-line summary of how each run ended. With
`--results FILE` the output goes to a Markdown file too, headed by the machine, the Postgres
settings that matter for commit-bound work, and the library versions.

    python benchmarks/run_all.py [--quick] [--database-url DSN] [--only throughput,latency] [--results benchmarks/results/DATE.md]
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import common

# Every benchmark is a script with a __main__ block; the rest are helpers. Found, not listed, so a new one cannot be left out.
SCRIPTS = tuple(sorted(p.stem for p in common.BENCH_DIR.glob("*.py")
                       if p.stem != "run_all" and 'if __name__ == "__main__":' in p.read_text()))
# Extra arguments of a script's --quick run here: the whole failure matrix takes ~3.5 min even in quick mode, and CI's
# soak stage runs it in full (tests/contracts/test_failure_matrix.py); the smoke run takes two fast faults.
QUICK_EXTRA = {"failures": ["--faults", "kill_worker,kill_leader"]}
SETTINGS = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections", "autovacuum")
PACKAGES = ("queue-workflows", "psycopg", "psycopg-pool", "pgqueuer", "asyncpg", "procrastinate", "pgserver")


def header(database_url: str | None) -> str:
    """Machine, Postgres settings and library versions, as Markdown."""
    import os
    import platform
    from importlib import metadata

    import psutil
    import psycopg

    with common.postgres_server(database_url) as server_url, psycopg.connect(server_url) as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}  # type: ignore[index]
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    return "\n".join([
        f"# Benchmark results, {time.strftime('%Y-%m-%d')}",
        "",
        f"- Machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, {platform.platform()}, Python {platform.python_version()}",
        f"- Postgres: {', '.join(f'{k}={v}' for k, v in settings.items())} ({'private pgserver' if not database_url else 'given server'}, otherwise defaults;"
        " latency.py's own private server also has track_commit_timestamp=on, to time from each enqueue's commit)",
        f"- Libraries: {', '.join(versions)}",
        "- Command: `python benchmarks/run_all.py --results <this file>`; each section below is one script's output, and its line in",
        "  `benchmarks/README.md` says what it measures. Every ratio is against a baseline measured in the same run.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SCRIPTS), help=f"comma separated subset of {', '.join(SCRIPTS)}")
    parser.add_argument("--results", default=None, help="also write everything to this Markdown file")
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
    sections = [header(args.database_url)] if args.results else []
    for name in chosen:
        started = time.monotonic()
        extra = QUICK_EXTRA.get(name, []) if args.quick else []
        child = subprocess.Popen([sys.executable, str(common.BENCH_DIR / f"{name}.py"), *passthrough, *extra],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        try:
            assert child.stdout is not None
            for line in child.stdout:
                print(line, end="", flush=True)
                lines.append(line)
            rc = child.wait()
        finally:
            if child.poll() is None:  # we were interrupted: let the child clean up its server
                child.terminate()
                child.wait(timeout=30)
        summary.append((name, rc, time.monotonic() - started))
        sections.append(f"## {name}\n\n`python benchmarks/{name}.py{' ' + ' '.join([*passthrough, *extra]) if passthrough or extra else ''}`"
                        f" ({time.monotonic() - started:.0f} s)\n\n```\n{''.join(lines).rstrip()}\n```\n")
        print(flush=True)
    if args.results:
        with open(args.results, "w") as out:
            out.write("\n".join(sections))
        print(f"results written to {args.results}")

    print("== run_all ==")
    for name, rc, seconds in summary:
        print(f"   {name:<11} {'ok' if rc == 0 else f'FAILED (exit {rc})':<16} {seconds:6.1f}s")
    return 0 if all(rc == 0 for _, rc, _ in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
