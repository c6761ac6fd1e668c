"""`queue-claim-worker --queue=Q`: one worker process for one queue."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from queue_workflows import ConfigError, QueueWorkflowsError, claim_worker

from .runtime import load_config_or_exit, setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    queue = next((a.split("=", 1)[1] for a in args if a.startswith("--queue=")), None)
    setup_logging(f"worker-{queue or '?'}")
    load_config_or_exit()
    try:
        return claim_worker.main(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except QueueWorkflowsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
