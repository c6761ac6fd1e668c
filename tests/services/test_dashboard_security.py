"""Who the dashboard answers, against the real app and Postgres: known Host names only, failed logins limited and logged.

Starlette's TestClient runs the real app; the limiter's clock is a virtual one the test moves,
and each "client" is a TestClient with its own peer address. The real service process (its
uvicorn, sockets and parallel guesses) is tested in test_dashboard_security_live.py.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

with warnings.catch_warnings():  # Starlette 1.x nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from dashboard_helpers import LOCAL, csrf_of
from procs import TEST_INGEST_QUEUES, query
from starlette.applications import Starlette

import queue_workflows
from qw_services.dashboard.app import create_app

PASSWORD = "s3cret-pass"
SWITCH = {"host": "box-a", "queue": "fetch", "op": "off-park"}


class Clock:
    """The limiter's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _configure(database_url: str, **dashboard: Any) -> None:
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, **dashboard)


def _app(clock: Clock) -> Starlette:
    return create_app(password=PASSWORD, now_fn=clock, failure_delay=0)


def _peer(app: Starlette, address: str) -> TestClient:
    """Another client of the same app (the first one runs its lifespan)."""
    return TestClient(app, base_url=LOCAL, client=(address, 40000))


def _login(c: TestClient, password: str) -> Any:
    token = csrf_of(c.get("/login").text)
    return c.post("/login", data={"csrf": token, "name": "alice", "password": password}, follow_redirects=False)


def _controls(url: str) -> list[dict]:
    return query(url, "SELECT host_label, queue, desired_state, requested_by FROM worker_controls ORDER BY 1, 2")


def _failures(caplog: pytest.LogCaptureFixture, kind: str, client: str) -> int:
    return sum(1 for r in caplog.records if r.levelno == logging.WARNING and f"failed authentication ({kind}) from {client} " in r.getMessage())


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_an_unknown_host_is_refused_on_every_route(database_url: str) -> None:
    with TestClient(create_app(password=PASSWORD), base_url=LOCAL) as c:
        rebound = {"Host": "rebind.example"}
        for path in ("/", "/runs", "/jobs", "/runs/1", "/login", "/healthz", "/static/dashboard.js"):
            response = c.get(path, headers=rebound)
            assert response.status_code == 400, (path, response.status_code)
            assert "Test GPU" not in response.text and "csrf" not in response.text
        action = c.post("/actions/worker", data=SWITCH, headers={**rebound, "Authorization": f"Bearer {PASSWORD}"})
        assert action.status_code == 400
        assert _controls(database_url) == [], "a rebound page's action wrote nothing"
        for host in ("127.0.0.1:8765", "localhost:8765", "localhost", "[::1]:8765", "LOCALHOST"):
            assert c.get("/", headers={"Host": host}).status_code == 200, host
        assert c.post("/actions/worker", data=SWITCH, headers={"Authorization": f"Bearer {PASSWORD}"}).status_code == 200


def test_the_allowed_hosts_come_from_the_settings(database_url: str) -> None:
    _configure(database_url, dashboard_allowed_hosts="dash.example.org:443,*.ops.example")
    with TestClient(create_app(), base_url="https://dash.example.org") as c:
        assert c.get("/").status_code == 200
        assert c.get("/", headers={"Host": "eu.ops.example"}).status_code == 200
        assert c.get("/", headers={"Host": "localhost:8765"}).status_code == 400, "a configured list replaces the default"
    _configure(database_url, dashboard_addr="10.1.2.3")
    with TestClient(create_app(), base_url="http://10.1.2.3:8765") as c:
        assert c.get("/").status_code == 200 and c.get("/", headers={"Host": "localhost"}).status_code == 200
        assert c.get("/", headers={"Host": "10.1.2.4"}).status_code == 400


def test_wrong_passwords_are_throttled_per_client_and_logged(database_url: str, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    _configure(database_url, dashboard_auth_failures_per_minute=3)
    caplog.set_level(logging.WARNING)
    app = _app(clock)
    with TestClient(app, base_url=LOCAL, client=("10.0.0.1", 40000)) as guesser:
        for _ in range(3):
            assert _login(guesser, "guess").status_code == 401
        throttled = _login(guesser, "guess")
        assert throttled.status_code == 429 and "too many failed logins" in throttled.text
        assert 1 <= int(throttled.headers["retry-after"]) <= 20
        assert _login(guesser, PASSWORD).status_code == 429, "the right password waits too: no oracle while throttled"
        assert _failures(caplog, "password", "10.0.0.1") == 3
        assert any("throttling authentication from 10.0.0.1" in r.getMessage() for r in caplog.records)

        assert _login(_peer(app, "10.0.0.2"), PASSWORD).status_code == 303, "another client is not held up"
        clock.now += 20  # 3 a minute: one back every 20 s
        assert _login(guesser, PASSWORD).status_code == 303


def test_wrong_bearer_tokens_are_throttled_and_logged(database_url: str, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    _configure(database_url, dashboard_auth_failures_per_minute=3)
    caplog.set_level(logging.WARNING)
    app = _app(clock)
    with TestClient(app, base_url=LOCAL, client=("10.0.0.1", 40000)) as guesser:
        for i in range(3):
            refused = guesser.post("/actions/worker", data=SWITCH, headers={"Authorization": f"Bearer guess-{i}"})
            assert refused.status_code == 401 and "bearer token" in refused.text
        throttled = guesser.post("/actions/worker", data=SWITCH, headers={"Authorization": f"Bearer {PASSWORD}"})
        assert throttled.status_code == 429 and "retry-after" in throttled.headers
        assert _failures(caplog, "bearer token", "10.0.0.1") == 3
        assert _controls(database_url) == []
        ok = _peer(app, "10.0.0.2").post("/actions/worker", data=SWITCH, headers={"Authorization": f"Bearer {PASSWORD}"})
        assert ok.status_code == 200, ok.text
        assert [r["requested_by"] for r in _controls(database_url)] == ["dashboard:token@10.0.0.2"]


def test_the_overall_limit_holds_across_clients(database_url: str, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    _configure(database_url, dashboard_auth_failures_per_minute=3, dashboard_auth_failures_total_per_minute=5)
    app = _app(clock)
    with TestClient(app, base_url=LOCAL, client=("10.0.0.1", 40000)) as first:
        second, third = _peer(app, "10.0.0.2"), _peer(app, "10.0.0.3")
        assert [_login(c, "guess").status_code for c in (first, first, first, second, second)] == [401] * 5
        assert _login(third, PASSWORD).status_code == 429, "five failures a minute from everyone: even a new client waits"
        assert any("all clients" in r.getMessage() for r in caplog.records)
        clock.now += 12
        assert _login(third, PASSWORD).status_code == 303


def test_the_login_page_does_not_tell_whether_a_bearer_token_is_right(database_url: str) -> None:
    with TestClient(create_app(password=PASSWORD), base_url=LOCAL) as c:
        c.get("/login")  # one session, so both answers carry the same CSRF token
        right = c.get("/login", headers={"Authorization": f"Bearer {PASSWORD}"})
        wrong = c.get("/login", headers={"Authorization": "Bearer not-it"})
        assert right.status_code == wrong.status_code == 200
        assert right.text == wrong.text
        assert "token ·" not in right.text


def test_a_forged_session_cookie_is_a_logged_failure(database_url: str, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    _configure(database_url, dashboard_auth_failures_per_minute=2)
    caplog.set_level(logging.WARNING)
    with TestClient(_app(clock), base_url=LOCAL, client=("10.0.0.9", 40000)) as c:
        forged = {"Cookie": "qw_dashboard=eyJ1c2VyIjogImFsaWNlIn0=.forged.signature"}
        statuses = [c.post("/actions/worker", data=SWITCH, headers=forged).status_code for _ in range(3)]
        assert statuses == [401, 401, 429]
        assert _failures(caplog, "session cookie", "10.0.0.9") == 2
        c.get("/")  # a real session that is simply not logged in is no failure
        assert c.post("/actions/worker", data=SWITCH).status_code == 401
        assert _failures(caplog, "session cookie", "10.0.0.9") == 2
    assert _controls(database_url) == []


def test_a_trusted_proxy_names_the_client_and_others_do_not(database_url: str, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    _configure(database_url, dashboard_trusted_proxies="10.9.0.0/16", dashboard_auth_failures_per_minute=1)
    caplog.set_level(logging.WARNING)
    app = _app(clock)
    forwarded = {"Authorization": f"Bearer {PASSWORD}", "X-Forwarded-For": "203.0.113.66"}
    with TestClient(app, base_url=LOCAL, client=("10.9.0.5", 40000)) as proxy:
        assert proxy.post("/actions/worker", data=SWITCH, headers=forwarded).status_code == 200
        assert _controls(database_url)[0]["requested_by"] == "dashboard:token@203.0.113.66"
        # The limit is per client behind the proxy: one client's failure does not lock out another.
        assert proxy.post("/actions/worker", data=SWITCH, headers={**forwarded, "Authorization": "Bearer x"}).status_code == 401
        assert _failures(caplog, "bearer token", "203.0.113.66") == 1
        other = {**forwarded, "X-Forwarded-For": "198.51.100.7"}
        assert proxy.post("/actions/worker", data={**SWITCH, "op": "on"}, headers=other).status_code == 200
        assert _controls(database_url)[0]["requested_by"] == "dashboard:token@198.51.100.7"
    untrusted = _peer(app, "10.8.0.5")
    assert untrusted.post("/actions/worker", data=SWITCH, headers=forwarded).status_code == 200
    assert _controls(database_url)[0]["requested_by"] == "dashboard:token@10.8.0.5", "an untrusted peer's X-Forwarded-For is ignored"


def test_a_large_body_is_refused_and_an_anonymous_one_is_not_read(database_url: str) -> None:
    with TestClient(create_app(password=PASSWORD), base_url=LOCAL) as c:
        big = c.post("/actions/worker", content=b"host=" + b"a" * (64 * 1024), headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert big.status_code == 413 and "over 65536 bytes" in big.text
        token = csrf_of(c.get("/login").text)
        login = c.post("/login", data={"csrf": token, "password": PASSWORD, "name": "x" * (64 * 1024)})
        assert login.status_code == 413

        def endless() -> Iterator[bytes]:  # chunked, no length: only reading it could find its size
            yield b"host=box-a&queue=fetch&op=off-hard&"
            raise AssertionError("an anonymous request's body was read past its first chunk")

        anonymous = TestClient(c.app, base_url=LOCAL).post("/actions/worker", content=endless(),
                                                             headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert anonymous.status_code == 401 and "log in first" in anonymous.text
    assert _controls(database_url) == []


def test_bad_dashboard_settings_are_clear_errors() -> None:
    from queue_workflows.errors import ConfigError
    from queue_workflows.settings import load_settings

    settings = load_settings(dashboard_allowed_hosts="Dash.Example:8765, ::1, [::1]:80", dashboard_trusted_proxies="10.0.0.0/8, ::1")
    assert settings.dashboard_allowed_hosts == ("dash.example", "[::1]", "[::1]")
    assert settings.dashboard_trusted_proxies == ("10.0.0.0/8", "::1")
    with pytest.raises(ConfigError, match=re.escape("QW_DASHBOARD_ALLOWED_HOSTS: 'evil/x' is not a host name")):
        load_settings(dashboard_allowed_hosts="localhost,evil/x")
    with pytest.raises(ConfigError, match="QW_DASHBOARD_TRUSTED_PROXIES: 'proxy.lan' is not an IP address or network"):
        load_settings(dashboard_trusted_proxies="proxy.lan")


def test_the_limiter_refills_evenly_and_forgets_only_idle_clients(clock: Clock) -> None:
    from qw_services.dashboard.limits import MAX_TRACKED_CLIENTS, FailureLimiter, Throttled

    limiter = FailureLimiter(2, 10_000, now_fn=clock)
    limiter.take("guesser")
    limiter.take("guesser")
    for i in range(MAX_TRACKED_CLIENTS + 10):  # a crowd of one-guess clients must not wash the guesser's record out
        limiter.take(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    with pytest.raises(Throttled) as refused:
        limiter.take("guesser")
    assert refused.value.retry_after == 30
    clock.now += 30
    limiter.take("guesser")
    limiter.give_back("guesser")  # a right answer costs nothing
    limiter.take("guesser")
    with pytest.raises(Throttled):
        limiter.take("guesser")
