"""`queue-scheduler`: the engine's scheduler (`queue_workflows.scheduler`) as a service."""

from __future__ import annotations

from collections.abc import Sequence

from queue_workflows import scheduler

from .runtime import setup_logging

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging("scheduler")
    return scheduler.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
