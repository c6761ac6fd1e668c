"""The process's engine configuration: settings plus where the DSN comes from.

Set once at startup by `configure()`; every reader calls `current()`, which
configures from the environment on first use so `import` alone is enough.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

from queue_workflows.errors import ConfigError
from queue_workflows.settings import ENV_PREFIX, Settings, load_settings

DEFAULT_DB_URL_ENV = f"{ENV_PREFIX}DATABASE_URL"


@dataclass(frozen=True)
class EngineConfig:
    settings: Settings
    db_url_env: str = DEFAULT_DB_URL_ENV

    def database_url(self) -> str:
        url = self.settings.database_url
        if self.db_url_env != DEFAULT_DB_URL_ENV or not url:
            url = os.environ.get(self.db_url_env) or url
        if not url:
            raise ConfigError(
                f"{self.db_url_env}: no database configured; set it to a Postgres DSN "
                "(e.g. postgresql://user:pw@host:5432/db)"
            )
        if self.settings.database_password_file is not None:
            return with_password(url, self.settings.database_password_file)
        return url


def with_password(url: str, path: Path) -> str:
    """`url` with the password read from `path` (a Docker secret); ConfigError naming the file when it cannot be read."""
    try:
        password = path.read_text().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(
            f"{ENV_PREFIX}DATABASE_PASSWORD_FILE: cannot read {path} ({exc.strerror or exc}); create the secret "
            "file (deploy/README.md, Secrets) or unset the variable"
        ) from None
    if not password:
        raise ConfigError(f"{ENV_PREFIX}DATABASE_PASSWORD_FILE: {path} is empty; write the database password into it")
    try:
        return conninfo.make_conninfo(url, password=password)
    except psycopg.Error:
        return url  # a malformed DSN: the connect path reports it, naming the variable to fix


_lock = threading.Lock()
_current: EngineConfig | None = None


def configure(*, db_url_env: str | None = None, **overrides: Any) -> EngineConfig:
    """Replace the process configuration; unknown keywords are rejected, not ignored."""
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"configure(): unknown setting(s) {', '.join(unknown)}")
    if db_url_env is not None and (not db_url_env or not db_url_env.replace("_", "").isalnum()):
        raise ConfigError(f"configure(db_url_env=...): {db_url_env!r} is not an environment variable name")
    config = EngineConfig(load_settings(**overrides), db_url_env or DEFAULT_DB_URL_ENV)
    global _current
    with _lock:
        _current = config
    return config


def current() -> EngineConfig:
    config = _current
    if config is None:
        with _lock:
            config = _current
        if config is None:
            config = configure()
    return config


def reset() -> None:
    """Forget the configuration (tests use this between cases)."""
    global _current
    with _lock:
        _current = None
