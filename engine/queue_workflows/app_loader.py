"""Starting a tool as the application configured it: the one path every entry point takes.

`queue-claim-worker`, `queue-orchestrator`, `qw` and `claim_worker.main()` import the
application module (`--app`, else QW_APP) *before* reading settings, so whatever its
`configure()` set (`db_url_env`, `ingest_queues`, ...) applies; then they read
`config.current()`, which keeps that configuration instead of replacing it. A problem the
user must fix is one line on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import psycopg

from queue_workflows import callables, config, db, tasks
from queue_workflows.common import logjson, sqlfile
from queue_workflows.config import EngineConfig
from queue_workflows.errors import (
    ConfigError,
    DatabaseFullError,
    DatabaseUnreachableError,
    InvalidNameError,
    InvalidPayloadError,
    MigrationError,
    QueueWorkflowsError,
    ReservedQueueError,
    SchemaNotReadyError,
    TransactionPoolerError,
    UnknownQueueError,
)
from queue_workflows.pooler import EXIT_TRANSACTION_POOLER

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(processName)s[%(process)d] %(name)s: %(message)s"
EXIT_USAGE = 2
"""What the user must fix: a setting, the DSN, the database, the schema, a queue name."""
EXIT_FAILED = 1
"""What may pass on its own: Postgres unreachable, or another engine error."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a tool a closed pipe stopped (`qw jobs --json | head`), never 1."""

_MUST_FIX = (ConfigError, InvalidNameError, InvalidPayloadError, UnknownQueueError, ReservedQueueError, MigrationError)

_JOBS = sqlfile.load("queue_workflows", "jobs.sql")


@dataclass(frozen=True)
class LoadedApp:
    config: EngineConfig
    app: str | None
    """The application module imported, if any (for messages that name QW_APP)."""


def ensure_cwd_on_path() -> None:
    """Put the working directory on sys.path, as `python -m` does, so `QW_APP=myapp.tasks` imports from the app's folder."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def import_app(module: str | None) -> None:
    """Import the host application module that registers its tasks (and may call `configure()`)."""
    if not module:
        return
    try:
        importlib.import_module(module)
        callables.note_app(module)
    except ImportError as exc:
        raise ConfigError(
            f"QW_APP/--app: cannot import application module {module!r} ({exc}); run from the folder "
            "that contains it or add that folder to PYTHONPATH"
        ) from None


def app_module(explicit: str | None = None) -> str | None:
    """`--app`, else QW_APP from the environment, `.env` or secrets (or an earlier `configure(app=...)`)."""
    if explicit:
        return explicit
    try:
        return config.current().settings.app
    except ConfigError:
        # A bad setting may be one the app's own configure() overrides: report it only after the import.
        return os.environ.get("QW_APP") or None


def load_app(explicit: str | None = None, *, need_database: bool = True) -> LoadedApp:
    """Import the app first, then read the configuration it left (database URL checked unless not needed yet)."""
    ensure_cwd_on_path()
    module = app_module(explicit)
    import_app(module)
    cfg = config.current()
    if need_database:
        cfg.database_url()
    return LoadedApp(cfg, module)


def ensure_logging(level: str = "INFO") -> None:
    """Log somewhere useful (stderr), as text or JSON lines (QW_LOG_FORMAT), unless the host process already set logging up.

    Settings that do not validate leave it at text: the tool's own read of them then reports
    the bad value (QW_LOG_FORMAT=xml included) as one line and exit 2.
    """
    if logging.getLogger().handlers:
        return
    try:
        settings = config.current().settings
    except ConfigError:
        settings = None
    if settings is not None and settings.log_format == "json":
        logging.getLogger().addHandler(logjson.json_handler(sys.stderr, host=settings.host_label))
        logging.getLogger().setLevel(level)
    else:
        logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)


def json_logs() -> bool:
    """The root logger writes JSON lines (a server that sets up its own loggers, uvicorn, should leave them to it)."""
    return any(isinstance(h.formatter, logjson.JsonFormatter) for h in logging.getLogger().handlers)


class _StopRelay:
    """Hands stop signals from the handler to a thread of their own.

    A Python signal handler runs in the main thread between two bytecodes, possibly inside
    `Event.wait()` while that holds the event's lock, so a handler that sets an event the main
    thread waits on can deadlock on it. The handler here only writes a byte to a pipe; this
    thread reads it and runs the callback with no lock of the main thread's held.
    """

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self.received = threading.Event()
        self.callback: Callable[[], None] = lambda: None
        threading.Thread(target=self._relay, name="stop-signals", daemon=True).start()

    def handler(self, _signum: int, _frame: object) -> None:
        try:
            os.write(self._write, b"!")
        except BlockingIOError:
            pass  # a burst of signals: one byte in the pipe already stops us

    def _relay(self) -> None:
        while os.read(self._read, 64):
            received, callback = self.received, self.callback
            received.set()
            try:
                callback()
            except Exception:  # noqa: BLE001 - the next signal must still be relayed
                logging.getLogger(__name__).exception("stop callback failed")


_relay: _StopRelay | None = None


def on_stop_signals(callback: Callable[[], None]) -> threading.Event:
    """Run `callback` on SIGTERM/SIGINT (installed from the main thread only); the event is set
    once one arrived. The callback runs on a relay thread, never inside the signal handler."""
    global _relay
    if threading.current_thread() is not threading.main_thread():
        return threading.Event()
    if _relay is None:
        _relay = _StopRelay()
    _relay.received, _relay.callback = threading.Event(), callback
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _relay.handler)
    return _relay.received


class ToolParser(argparse.ArgumentParser):
    """argparse whose errors are one short usage line and one error line (exit 2), not the full usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"usage: {short_usage(self)}\n{self.prog}: error: {' '.join(message.split())}\n")


def short_usage(parser: argparse.ArgumentParser) -> str:
    """`prog` with its positionals and required options only; `--help` tells the rest."""
    parts = [parser.prog]
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its arguments
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            parts.append("COMMAND")
        elif not action.option_strings:
            parts.append(str(action.metavar) if action.metavar else "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest)
        elif action.required:
            parts.append(f"{action.option_strings[-1]} {action.metavar or action.dest.upper()}")
    return " ".join(parts) + f" [options] (see {parser.prog} --help)"


def failure(exc: BaseException) -> tuple[int, str] | None:
    """(exit code, one line) for an error a tool reports without a traceback; None for a bug."""
    if isinstance(exc, SchemaNotReadyError):
        unreachable = isinstance(exc.__cause__, DatabaseUnreachableError)
        return (EXIT_FAILED if unreachable else EXIT_USAGE), str(exc)
    if isinstance(exc, DatabaseFullError):
        return EXIT_FAILED, str(exc)
    if isinstance(exc, TransactionPoolerError):
        return EXIT_TRANSACTION_POOLER, str(exc)
    if isinstance(exc, _MUST_FIX):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return EXIT_USAGE, f"{str(exc).strip().splitlines()[0]}; the schema is missing: {db.MIGRATE_HINT}"
    if isinstance(exc, psycopg.Error):
        return failure(db.connect_error(exc))
    if isinstance(exc, QueueWorkflowsError):
        return EXIT_FAILED, str(exc)
    return None


def run_tool(body: Callable[[], int]) -> int:
    """Run a tool's body; known problems become `error: <one line>` on stderr and an exit code."""
    try:
        code = body()
        sys.stdout.flush()  # a reader gone is seen here, where it is handled, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        known = failure(exc)
        if known is None:
            raise
        code, message = known
        print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
        return code


def _reader_gone() -> int:
    """The reader of stdout closed early: exit quietly, as a tool that SIGPIPE ended would."""
    # Interpreter exit flushes stdout again: point it at /dev/null so that flush cannot fail too (Python docs, signal).
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def warn_unrunnable_jobs(queue: str, loaded: LoadedApp) -> list[str]:
    """Warn at start when jobs on an ingest `queue` would burn their attempts on UnknownTaskError.

    One bounded query: the task names at the head of the queue that this process has not
    registered. Returns the warnings logged (for tests and callers that print them).
    """
    registered = tasks.registered_task_names()
    where = f"QW_APP={loaded.app}" if loaded.app else "QW_APP is not set"
    found = []
    if not registered:
        found.append(
            f"no ingest task is registered ({where}): every job on queue {queue!r} will fail with "
            "UnknownTaskError; set QW_APP (or --app) to the module that calls register_ingest_task"
        )
    with db.connect(autocommit=True, url=loaded.config.database_url()) as conn:
        named = {row["task_name"] for row in conn.execute(_JOBS["ingest_head_task_names"], {"queue": queue})}
    unknown = sorted(named - registered)
    if unknown:
        found.append(
            f"queued jobs on {queue!r} name task(s) not registered here: {', '.join(unknown)} "
            f"(registered: {', '.join(sorted(registered)) or 'none'}; {where}); they will fail with UnknownTaskError"
        )
    for warning in found:
        log.warning("%s", warning)
    return found
