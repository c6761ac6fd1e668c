"""Worker liveness: the background beat that keeps a running job's worker provably alive."""

from __future__ import annotations

from queue_workflows.worker.liveness.beat import LivenessBeat
from queue_workflows.worker.liveness.config import BeatConfig

__all__ = ["BeatConfig", "LivenessBeat"]
