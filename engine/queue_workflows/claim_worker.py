"""Face: the seed's `queue_workflows.claim_worker`; the worker lives in `queue_workflows.worker`.

    queue_workflows.claim_worker.main(["--queue", "fetch"])
"""

from __future__ import annotations

from queue_workflows.worker.claim import ClaimWorker, ready_channel
from queue_workflows.worker.cli import build_parser, build_worker, main

__all__ = ["ClaimWorker", "build_parser", "build_worker", "main", "ready_channel"]

if __name__ == "__main__":
    raise SystemExit(main())
