"""The real `queue-dashboard` process under attack: rebound Host names, forged forwarding, parallel guesses, unread uploads."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import pytest
from dashboard_helpers import csrf_of, start_dashboard
from procs import Procs, query

pytestmark = pytest.mark.multiprocess
PASSWORD = "s3cret-pass"
SWITCH = {"host": "box-a", "queue": "fetch", "op": "off-park"}
GUESSES = 40


def _requested_by(url: str) -> list[str]:
    return [r["requested_by"] for r in query(url, "SELECT requested_by FROM worker_controls ORDER BY updated_at")]


def _log(procs: Procs) -> str:
    return procs.dashboard.log_path.read_text(errors="replace")  # type: ignore[attr-defined]


def _first_answer(base: str, request: bytes, within: float = 5.0) -> tuple[int, float]:
    """Send `request` as raw bytes and return the status line's code and how long it took; never more than the bytes given."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=within) as s:
        started = time.monotonic()
        s.sendall(request)
        try:
            head = s.recv(4096)
        except TimeoutError:
            raise AssertionError(f"no answer within {within} s: the server waits for the rest of the body") from None
    return int(head.split(b" ", 2)[1]), time.monotonic() - started


def test_the_service_answers_only_its_own_host_names(database_url: str, procs: Procs) -> None:
    base = start_dashboard(procs, database_url, QW_DASHBOARD_PASSWORD=PASSWORD)
    rebound = {"Host": "rebind.example:8765"}
    assert httpx.get(base + "/", headers=rebound).status_code == 400
    with httpx.stream("GET", base + "/events", headers=rebound, timeout=5) as events:
        assert events.status_code == 400, "the event stream is refused to a rebound name too"
    action = httpx.post(base + "/actions/worker", data=SWITCH, headers={**rebound, "Authorization": f"Bearer {PASSWORD}"})
    assert action.status_code == 400 and _requested_by(database_url) == []
    with httpx.stream("GET", base + "/events", timeout=5) as events:
        assert events.status_code == 200


def test_forwarded_for_from_an_untrusted_peer_is_not_the_audited_client(database_url: str, procs: Procs) -> None:
    base = start_dashboard(procs, database_url, QW_DASHBOARD_PASSWORD=PASSWORD)
    done = httpx.post(base + "/actions/worker", data=SWITCH, headers={"Authorization": f"Bearer {PASSWORD}", "X-Forwarded-For": "203.0.113.66"})
    assert done.status_code == 200, done.text
    assert _requested_by(database_url) == ["dashboard:token@127.0.0.1"]


def test_parallel_guesses_are_throttled_and_logged(database_url: str, procs: Procs) -> None:
    base = start_dashboard(procs, database_url, QW_DASHBOARD_PASSWORD=PASSWORD, QW_DASHBOARD_AUTH_FAILURES_PER_MINUTE="5")
    with httpx.Client(base_url=base, timeout=30, limits=httpx.Limits(max_connections=GUESSES)) as web, ThreadPoolExecutor(GUESSES) as pool:
        form = {"csrf": csrf_of(web.get("/login").text), "name": "mallory"}
        started = time.monotonic()
        passwords = list(pool.map(lambda i: web.post("/login", data={**form, "password": f"guess-{i}"}).status_code, range(GUESSES)))
        elapsed = time.monotonic() - started
        tokens = list(pool.map(lambda i: web.post("/actions/worker", data=SWITCH, headers={"Authorization": f"Bearer guess-{i}"}).status_code,
                               range(GUESSES)))
    print(f"{GUESSES} parallel wrong passwords: {passwords.count(401)} checked, {passwords.count(429)} refused in {elapsed:.2f} s")
    assert passwords.count(401) == 5 and passwords.count(429) == GUESSES - 5, passwords
    assert tokens.count(429) == GUESSES, "the same client's budget covers every kind of credential"
    log = _log(procs)
    assert log.count("failed authentication (password) from 127.0.0.1") == 5, log[-2000:]
    assert "throttling authentication from 127.0.0.1" in log
    assert _requested_by(database_url) == []


def test_an_anonymous_upload_is_answered_without_being_read(database_url: str, procs: Procs) -> None:
    base = start_dashboard(procs, database_url, QW_DASHBOARD_PASSWORD=PASSWORD)
    head = f"POST /actions/worker HTTP/1.1\r\nHost: 127.0.0.1:{urlsplit(base).port}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    status, took = _first_answer(base, f"{head}Content-Length: {64 << 20}\r\n\r\n".encode() + b"host=" + b"a" * 4096)
    assert status == 413 and took < 2, (status, took)
    chunk = b"host=box-a&queue=fetch&op=off-hard&reason=" + b"x" * 4000
    status, took = _first_answer(base, f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    assert status == 401 and took < 2, (status, took)
    assert _requested_by(database_url) == []
