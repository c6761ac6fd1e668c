"""The TCP deadlines every engine connection gets (QW_DB_NETWORK_TIMEOUT_SECONDS), and the DSN's own winning."""

from __future__ import annotations

import pytest

from queue_workflows import db
from queue_workflows.db_network import network_timeouts


def test_deadlines_follow_the_setting_and_yield_to_the_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert network_timeouts("postgresql://u@h/db", 10) == {
        "connect_timeout": 10, "tcp_user_timeout": 10000, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    }
    mine = network_timeouts("postgresql://u@h/db?connect_timeout=3&keepalives=0&tcp_user_timeout=1", 10)
    assert not {"connect_timeout", "keepalives", "tcp_user_timeout"} & set(mine)
    assert network_timeouts("postgresql://u@h/db", 0) == {}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "7")
    assert "connect_timeout" not in network_timeouts("postgresql://u@h/db", 10), "libpq's own variable is the DSN's say too"


def test_engine_connections_carry_them(database_url: str) -> None:
    import queue_workflows

    queue_workflows.configure(database_url=database_url, db_network_timeout_seconds=4)
    with db.connect(url=database_url) as conn:
        params = conn.info.get_parameters()
    assert params.get("tcp_user_timeout") == "4000" and params.get("keepalives_count") == "3", params
