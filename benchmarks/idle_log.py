"""Postgres log lines a minute from an idle cluster: W idle workers on one queue over H host
labels, with a leading orchestrator, against a private server whose log this script reads.

Idle workers wait in line for their queue's idle baton; before migration 0032 every timed-out
wait logged `ERROR: canceling statement due to lock timeout` (about 1,400 lines a minute with
ten workers). Target: at most 1 line a minute.

    python benchmarks/idle_log.py [--workers 10] [--hosts 3] [--seconds 60] [--quick]
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import common


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.database_url:
        parser.error("this benchmark reads its server's log: it runs a private pgserver only")
    seconds = 15.0 if args.quick else args.seconds
    import pgserver

    logging.getLogger("pgserver").setLevel(logging.WARNING)
    data_dir = Path(tempfile.mkdtemp(prefix="qwbench-pg-"))
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    try:
        server_url = server.get_uri()
        common.banner("idle log: Postgres log lines a minute with idle workers", args, server_url)
        url = common.qw_database(server_url)
        with common.Procs(args.keep_logs) as procs:
            orchestrator = procs.qw_orchestrator(common.qw_env(url))
            workers = [procs.qw_worker(common.qw_env(url, QW_HOST_LABEL=f"host{n % args.hosts}")) for n in range(args.workers)]
            deadline = time.monotonic() + 60
            while common.scalar(url, "SELECT count(*) FROM worker_heartbeats") < args.workers:
                procs.check_alive([orchestrator, *workers])
                if time.monotonic() > deadline:
                    print("the workers did not all start within 60 s", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            time.sleep(2.0)  # start-up lines are not idle lines
            start = server.log.stat().st_size
            time.sleep(seconds)
            procs.check_alive([orchestrator, *workers])
            with server.log.open("rb") as log:
                log.seek(start)
                lines = log.read().decode(errors="replace").splitlines()
        levels = Counter(word for line in lines for word in ("ERROR", "WARNING", "LOG", "FATAL") if f" {word}: " in line)
        per_minute = len(lines) * 60.0 / seconds
        common.print_table(
            ["idle workers", "hosts", "seconds", "log lines", "lines / minute", "by level", "target"],
            [[args.workers, args.hosts, f"{seconds:g}", len(lines), f"{per_minute:.1f}", dict(levels) or "-", "<= 1 / minute"]],
        )
        for line in lines[:5]:
            print("   ", line)
        return 0 if per_minute <= 1.0 else 1
    finally:
        with contextlib.suppress(Exception):
            server._cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
