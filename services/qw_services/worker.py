"""`queue-claim-worker --queue Q [--app M]`: one worker process for one queue."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from queue_workflows import claim_worker

from .runtime import setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    queue = claim_worker.build_parser().parse_args(args).queue  # `--queue hydro` and `--queue=hydro` alike
    setup_logging(f"worker-{queue}")
    return claim_worker.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
