"""`python -m qw_torch [N]`: enqueue N (4) inference jobs (seeds 0..N-1) and one training step for the example's model."""

from __future__ import annotations

import json
import sys
from typing import Any

from queue_workflows import app_loader, db, node_queue
from qw_torch import MODEL_ID


def enqueue(jobs: int) -> dict[str, Any]:
    infer = [node_queue.enqueue_node_job("qw_torch.infer", "gpu", required_model=MODEL_ID, inputs={"seed": seed})["id"]
             for seed in range(jobs)]
    train = node_queue.enqueue_node_job("qw_torch.train_step", "gpu", required_model=MODEL_ID, inputs={"seed": 0})["id"]
    return {"infer": infer, "train_step": train}


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and not argv[0].isdigit()):
        print("usage: python -m qw_torch [JOBS]", file=sys.stderr)
        return 2
    jobs = int(argv[0]) if argv else 4

    def body() -> int:
        db.wait_for_schema()
        print(json.dumps(enqueue(jobs)), flush=True)
        return 0

    return app_loader.run_tool(body)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
