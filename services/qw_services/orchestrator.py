"""`queue-orchestrator`: the engine's orchestrator (`queue_workflows.leader.orchestrator`) as a service."""

from __future__ import annotations

from collections.abc import Sequence

from queue_workflows.leader import orchestrator
from queue_workflows.leader.orchestrator import bootstrap_when_reachable

from .runtime import setup_logging

__all__ = ["bootstrap_when_reachable", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging("orchestrator")
    return orchestrator.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
