from __future__ import annotations

import pydantic
import pytest

import queue_workflows
from queue_workflows import config
from queue_workflows.errors import ConfigError
from queue_workflows.settings import lease_margin_seconds, load_settings


def test_environment_with_qw_prefix_is_read(monkeypatch):
    monkeypatch.setenv("QW_HOST_LABEL", "spark")
    monkeypatch.setenv("QW_INGEST_QUEUES", "hydro, corrdiff")
    monkeypatch.setenv("QW_LEASE_SECONDS", "12")
    settings = load_settings()
    assert (settings.host_label, settings.ingest_queues, settings.lease_seconds) == ("spark", frozenset({"hydro", "corrdiff"}), 12.0)


def test_host_label_defaults_to_the_hostname(monkeypatch):
    import socket

    monkeypatch.delenv("QW_HOST_LABEL", raising=False)
    assert load_settings().host_label == socket.gethostname().split(".")[0]


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("QW_LEASE_SECONDS", "soon", "QW_LEASE_SECONDS"),
        ("QW_POLL_SECONDS", "0", "QW_POLL_SECONDS"),
        ("QW_HOST_LABEL", "bad host/name", "QW_HOST_LABEL"),
        ("QW_CLAIM_ORDER", "random", "QW_CLAIM_ORDER"),
        ("QW_INGEST_QUEUES", "fetch,CPU!", "QW_INGEST_QUEUES"),
        ("QW_LEASE_RENEW_SECONDS", "45", "QW_LEASE_RENEW_SECONDS .45. must be shorter than QW_LEASE_SECONDS"),
    ],
)
def test_a_bad_value_is_a_clear_error_naming_the_variable(monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=message):
        load_settings()


def test_db_url_env_selects_the_variable_holding_the_dsn(monkeypatch):
    monkeypatch.setenv("MY_DB_URL", "postgresql://example/db")
    monkeypatch.delenv("QW_DATABASE_URL", raising=False)
    assert queue_workflows.configure(db_url_env="MY_DB_URL").database_url() == "postgresql://example/db"


def test_missing_database_names_the_variable(monkeypatch):
    monkeypatch.delenv("MY_DB_URL", raising=False)
    monkeypatch.delenv("QW_DATABASE_URL", raising=False)
    with pytest.raises(ConfigError, match="MY_DB_URL: no database configured"):
        queue_workflows.configure(db_url_env="MY_DB_URL").database_url()


def test_current_configures_lazily_and_settings_are_immutable(monkeypatch):
    monkeypatch.setenv("QW_HOST_LABEL", "lazy")
    config.reset()
    settings = config.current().settings
    assert settings.host_label == "lazy"
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        settings.host_label = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(("lease", "renew", "margin"), [(3.0, 0.5, 0.75), (1.0, 0.25, 0.25), (30.0, 10.0, 2.0), (12.0, 10.0, 1.0)])
def test_a_worker_gives_a_short_lease_up_a_quarter_early_a_long_one_2s_early_and_never_before_its_renewal(lease, renew, margin):
    # A tenth of a 3 s lease (0.3 s) was overrun by a worker on a loaded host in the failure matrix.
    assert lease_margin_seconds(lease, renew) == margin
    assert lease - margin > renew
