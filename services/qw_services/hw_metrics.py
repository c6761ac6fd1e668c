"""`queue-hw-metrics`: the engine's hw-metrics sidecar command (`queue_workflows.telemetry.service`) as a service."""

from __future__ import annotations

from collections.abc import Sequence

from queue_workflows.telemetry import service
from queue_workflows.telemetry.service import build_parser, health

from .runtime import setup_logging

__all__ = ["build_parser", "health", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging("hw-metrics")
    return service.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
