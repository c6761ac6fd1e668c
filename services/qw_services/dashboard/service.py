"""`queue-dashboard` / `qw web`: serve the dashboard with uvicorn, localhost unless told otherwise.

Every flag has a QW_ setting behind it (docs/dashboard.md); a flag wins over the environment.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from queue_workflows import app_loader, config, db
from queue_workflows.errors import ConfigError

from ..runtime import setup_logging

__all__ = ["add_arguments", "build_parser", "main", "main_with", "serve"]

FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--addr", "dashboard_addr", str, "address to listen on (QW_DASHBOARD_ADDR, default 127.0.0.1: this machine only)"),
    ("--port", "dashboard_port", int, "port (QW_DASHBOARD_PORT, default 8765)"),
    ("--refresh", "dashboard_refresh_seconds", float, "seconds between panel re-reads when no NOTIFY comes (QW_DASHBOARD_REFRESH_SECONDS, default 2)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, _, kind, text in FLAGS:
        parser.add_argument(flag, type=kind, default=None, help=text)
    parser.add_argument("--password-file", type=Path, default=None,
                        help="file holding the password that allows actions (default: QW_DASHBOARD_PASSWORD or the "
                             "qw_dashboard_password Docker secret; none: read-only)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-dashboard", description="Serve the operator dashboard: hosts, workers (ON/OFF), queues, runs and jobs, live.")
    parser.add_argument("--app", default=None, help="module imported first; its configure() applies (default: QW_APP)")
    add_arguments(parser)
    return parser


def _password(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"--password-file: cannot read {path} ({exc.strerror})") from None
    if not text:
        raise ConfigError(f"--password-file: {path} is empty")
    return text


def _check_listen(addr: str, port: int) -> None:
    """A ConfigError (exit 2) for an address this machine cannot listen on; uvicorn would exit 3 after a log line."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot listen on {addr!r} port {port} (QW_DASHBOARD_ADDR / --addr, QW_DASHBOARD_PORT / --port): {reason}") from None


def serve(args: argparse.Namespace) -> int:
    """Apply the flags over the settings, check the database once, then serve until SIGTERM/Ctrl-C."""
    import uvicorn

    from .app import create_app
    from .quiet_server import QuietServer

    given = {field: value for flag, field, _, _ in FLAGS if (value := getattr(args, flag[2:].replace("-", "_"))) is not None}
    if given:  # a flag wins over the environment, and is validated like it
        config.configure(db_url_env=config.current().db_url_env, **(config.current().settings.model_dump() | given))
    settings = config.current().settings
    _check_listen(settings.dashboard_addr, settings.dashboard_port)
    password = _password(args.password_file)
    db.check_database(url=config.current().database_url())
    app = create_app(password=password)
    mode = "read-only (no password)" if app.state.auth.read_only else "actions need the password"
    app_loader.log.info("dashboard on http://%s:%d/ (%s); it answers the Host names %s (QW_DASHBOARD_ALLOWED_HOSTS)",
                        settings.dashboard_addr, settings.dashboard_port, mode, ", ".join(app.state.allowed_hosts))
    server = QuietServer(uvicorn.Config(
        app, host=settings.dashboard_addr, port=settings.dashboard_port, log_level=logging.getLevelName(logging.getLogger().level).lower(),
        access_log=False, timeout_graceful_shutdown=2, proxy_headers=False,
        log_config=None if app_loader.json_logs() else uvicorn.config.LOGGING_CONFIG))  # JSON: uvicorn's lines go through the root's handler too  # the app trusts QW_DASHBOARD_TRUSTED_PROXIES only
    server.run()
    return 0 if server.started else 3  # what uvicorn.run exits with when the server never started


def main(argv: Sequence[str] | None = None) -> int:
    return main_with(build_parser().parse_args(argv))


def main_with(args: argparse.Namespace) -> int:
    """Run the service from parsed flags (`queue-dashboard` and `qw web` share them)."""
    setup_logging("dashboard")

    def _body() -> int:
        app_loader.load_app(args.app)
        return serve(args)

    return app_loader.run_tool(_body)


if __name__ == "__main__":
    raise SystemExit(main())
