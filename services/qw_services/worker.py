"""`queue-claim-worker --queue Q [--app M]`: one worker process for one queue."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from queue_workflows.worker import cli, exits

from .runtime import setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    queue = cli.build_parser().parse_args(args).queue  # `--queue hydro` and `--queue=hydro` alike
    setup_logging(f"worker-{queue}")
    exits.lead_process_group()  # so a watchdog's exit finds the job's orphaned grandchildren too
    return cli.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
