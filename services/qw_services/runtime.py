"""What every service process does first: logging, configuration, signals."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

import queue_workflows
from queue_workflows import ConfigError, EngineConfig

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(processName)s[%(process)d] %(name)s: %(message)s"


def setup_logging(role: str) -> None:
    level = os.environ.get("QW_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level if level in logging.getLevelNamesMapping() else "INFO", format=LOG_FORMAT, stream=sys.stderr)
    import multiprocessing

    multiprocessing.current_process().name = role


def load_config_or_exit() -> EngineConfig:
    """Configure from the environment; a bad value exits 2 with the variable named."""
    try:
        config = queue_workflows.configure()
        config.database_url()
        return config
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def stop_on_signals(callback: Callable[[], None]) -> threading.Event:
    """Run `callback` on SIGTERM/SIGINT; returns an event set when a signal arrived."""
    received = threading.Event()

    def _handler(signum: int, _frame: object) -> None:
        received.set()
        callback()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _handler)
    return received
