"""Worker liveness: the background beat that keeps a running job's worker provably alive."""

from __future__ import annotations

from queue_workflows.worker.liveness.beat import LivenessBeat

__all__ = ["LivenessBeat"]
