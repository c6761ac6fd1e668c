"""The operator dashboard against the real Postgres: pages, auth/CSRF on every action, bad input changes nothing.

Starlette's TestClient runs the real app (its live hub LISTENs on the real database); the
SSE fan-out and the connection count are tested against the real service process in
test_dashboard_live.py, and the page in a real browser in test_dashboard_browser.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():  # Starlette 1.x nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

import qw_test_app
from dag_rows import approval, complete, rows
from dashboard_helpers import LOCAL, csrf_of, publish, snapshot
from procs import query

import queue_workflows
from queue_workflows import node_queue, register_ingest_task
from qw_services.dashboard import graph
from qw_services.dashboard.app import create_app

PASSWORD = "s3cret-pass"


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(password=PASSWORD), base_url=LOCAL) as c:
        yield c


@pytest.fixture
def read_only(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(), base_url=LOCAL) as c:
        yield c


def _worker_row(url: str, host: str, queue: str, state: str = "idle") -> None:
    query(url, "INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, state) VALUES (%s, %s, %s, 4242, 0, %s)",
          (f"{host}:{queue}:4242:x", host, queue, state))


def _controls(url: str) -> list[dict]:
    return query(url, "SELECT host_label, queue, desired_state, stop_policy, requested_by FROM worker_controls ORDER BY 1, 2")


def _login(client: TestClient, name: str = "alice", password: str = PASSWORD) -> None:
    token = csrf_of(client.get("/login").text)
    response = client.post("/login", data={"csrf": token, "name": name, "password": password}, follow_redirects=False)
    assert response.status_code == 303, response.text


def _page_token(client: TestClient) -> str:
    html = client.get("/").text
    start = html.index('"X-CSRF-Token": "') + len('"X-CSRF-Token": "')
    return html[start:html.index('"', start)]


def test_overview_shows_hosts_workers_and_queues_read_only(read_only: TestClient, database_url: str) -> None:
    _worker_row(database_url, "box-a", "fetch", "busy")
    publish(database_url, snapshot("gpu-box-1", 12.5))
    with TestClient(create_app(), base_url=LOCAL) as fresh:  # a late joiner reads host_metrics first
        html = fresh.get("/").text
    assert "gpu-box-1" in html and "Test GPU" in html
    assert 'data-host="box-a" data-queue="fetch" data-state="dead"' in html, "no session holds its lock: dead"
    assert '<tr data-queue="fetch">' in html and '<tr data-queue="cpu">' in html
    assert "read-only (no password configured)" in html
    response = read_only.post("/actions/worker", data={"host": "box-a", "queue": "fetch", "op": "off-hard"})
    assert response.status_code == 403 and "read-only" in response.text
    assert _controls(database_url) == []


def test_every_action_needs_login_and_a_csrf_token_and_records_who(client: TestClient, database_url: str) -> None:
    form = {"host": "box-a", "queue": "fetch", "op": "off-park"}
    anonymous = client.post("/actions/worker", data=form)
    assert anonymous.status_code == 401 and "log in first" in anonymous.text
    token = csrf_of(client.get("/login").text)
    wrong = client.post("/login", data={"csrf": token, "name": "alice", "password": "nope"})
    assert wrong.status_code == 401 and "wrong password" in wrong.text
    assert client.post("/login", data={"csrf": "forged", "name": "alice", "password": PASSWORD}).status_code == 403
    assert client.post("/login", data={"csrf": token, "name": "alice", "password": PASSWORD}, follow_redirects=False).status_code == 303
    no_token = client.post("/actions/worker", data=form)
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    forged = client.post("/actions/worker", data={**form, "csrf": "not-the-token"})
    assert forged.status_code == 403
    cross_site = client.post("/actions/worker", data={**form, "csrf": _page_token(client)}, headers={"Origin": "http://evil.example"})
    assert cross_site.status_code == 403 and "cross-site" in cross_site.text
    assert _controls(database_url) == []

    done = client.post("/actions/worker", data=form, headers={"X-CSRF-Token": _page_token(client), "HX-Request": "true"})
    assert done.status_code == 200 and "OFF (park)" in done.text and 'class="flash ok"' in done.text
    [row] = _controls(database_url)
    assert (row["desired_state"], row["stop_policy"]) == ("off", "park")
    assert row["requested_by"].startswith("dashboard:alice@")
    overview = client.get("/").text
    assert 'data-host="box-a" data-queue="fetch" data-state="absent"' in overview, "an OFF switch with no process stays listed"
    assert "by dashboard:alice@" in overview
    back_on = client.post("/actions/worker", data={**form, "op": "on", "csrf": _page_token(client)})
    assert back_on.status_code == 200 and _controls(database_url)[0]["desired_state"] == "on"


def test_a_bearer_token_acts_without_a_session(client: TestClient, database_url: str) -> None:
    form = {"host": "box-b", "queue": "cpu", "op": "off-hard"}
    assert client.post("/actions/worker", data=form, headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.post("/actions/worker", data=form, headers={"Authorization": f"Bearer {PASSWORD}"})
    assert ok.status_code == 200, ok.text
    assert _controls(database_url)[0]["requested_by"].startswith("dashboard:token@")


@pytest.mark.parametrize("form, says", [
    ({"host": "box-a", "queue": "fetch", "op": "explode"}, "op must be one of"),
    ({"host": "box-a", "queue": "nosuchqueue", "op": "off-hard"}, "nosuchqueue"),
    ({"host": "bad host!", "queue": "fetch", "op": "off-hard"}, "host label"),
    ({"queue": "fetch", "op": "off-hard"}, "missing the host field"),
    ({"host": "box-a", "queue": "fetch", "op": "on", "reason": "x" * 201}, "at most 200"),
])
def test_bad_worker_form_gets_a_clear_message_and_changes_nothing(client: TestClient, database_url: str, form: dict, says: str) -> None:
    _login(client)
    response = client.post("/actions/worker", data={**form, "csrf": _page_token(client)})
    assert response.status_code == 400 and says in response.text, response.text
    assert _controls(database_url) == []


def test_run_page_draws_the_dag_and_cancel_restart_input_work(client: TestClient, database_url: str, conn) -> None:
    run_id = queue_workflows.start_run(approval(), {})
    complete(database_url, conn, run_id, "draft", {"echo": {"v": 1}})
    page = client.get(f"/runs/{run_id}").text
    assert page.count("<g class=\"node") == 3
    for node, status in (("draft", "completed"), ("ask", "awaiting_input"), ("publish", "pending")):
        assert f'data-node="{node}" data-status="{status}"' in page
    assert page.count('class="edge"') == 2
    assert f'<a href="/runs/{run_id}">#{run_id}</a>' in client.get("/runs").text

    _login(client)
    token = _page_token(client)
    bad = client.post(f"/runs/{run_id}/input", data={"csrf": token, "node": "ask", "value": "{not json"})
    assert bad.status_code == 400 and "not JSON" in bad.text
    not_object = client.post(f"/runs/{run_id}/input", data={"csrf": token, "node": "ask", "value": "[1]"})
    assert not_object.status_code == 400 and "JSON object" in not_object.text
    wrong_node = client.post(f"/runs/{run_id}/input", data={"csrf": token, "node": "publish", "value": "{}"})
    assert wrong_node.status_code == 400
    assert query(database_url, "SELECT count(*) AS n FROM workflow_input_submissions")[0]["n"] == 0
    given = client.post(f"/runs/{run_id}/input", data={"csrf": token, "node": "ask", "value": '{"approver": "bob"}'})
    assert given.status_code == 200, given.text
    [sub] = query(database_url, "SELECT node_name, value FROM workflow_input_submissions")
    assert sub == {"node_name": "ask", "value": {"approver": "bob"}}

    assert client.post("/runs/999999/cancel", data={"csrf": token}).status_code == 400
    cancelled = client.post(f"/runs/{run_id}/cancel", data={"csrf": token, "reason": "stop it"})
    assert cancelled.status_code == 200, cancelled.text
    run = query(database_url, "SELECT status, error FROM workflow_runs WHERE id = %s", (run_id,))[0]
    assert run["status"] == "cancelled" and "dashboard:alice@" in (run["error"] or ""), run
    assert client.post(f"/runs/{run_id}/restart", data={"csrf": token}).status_code == 200
    assert query(database_url, "SELECT status FROM workflow_runs WHERE id = %s", (run_id,))[0]["status"] == "running"
    assert rows(database_url, run_id)["ask"]["status"] == "awaiting_input"
    assert client.get("/runs/abc").status_code == 400 and client.get("/runs/424242").status_code == 404
    # Every action is on the run's trail with who and when, and the run page lists them.
    trail = query(database_url, "SELECT action, requested_by, at FROM workflow_run_actions WHERE run_id = %s ORDER BY id", (run_id,))
    assert [a["action"] for a in trail] == ["input", "cancel", "restart"]
    assert all(a["requested_by"].startswith("dashboard:alice@") and a["at"] is not None for a in trail), trail
    page = client.get(f"/runs/{run_id}").text
    assert 'id="run-actions"' in page and page.count("dashboard:alice@") >= 3


def test_jobs_search_and_one_jobs_story(client: TestClient, database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)
    a = node_queue.enqueue_ingest_job("record", "fetch", {"token": "a"})
    node_queue.enqueue_ingest_job("record", "load", {"token": "b"})
    query(database_url, "UPDATE ingest_jobs SET status = 'failed', error = 'boom', finished_at = now() WHERE id = %s", (a["id"],))
    found = client.get("/jobs", params={"queue": "fetch", "task": "REC"}).text
    assert f"ingest:{a['id']}" in found and found.count('href="/jobs/ingest:') == 1
    assert "No job matches" in client.get("/jobs", params={"task": "nothing-like-it"}).text
    bad = client.get("/jobs", params={"status": "exploded"})
    assert bad.status_code == 400 and "status must be one of" in bad.text
    story = client.get(f"/jobs/ingest:{a['id']}").text
    assert "boom" in story and "failed" in story
    assert client.get("/jobs/ingest:987654").status_code == 404
    assert client.get("/jobs/x:1").status_code == 400


def test_queue_panel_counts_and_throughput(client: TestClient, database_url: str) -> None:
    register_ingest_task("record", qw_test_app.record)
    for _ in range(3):
        node_queue.enqueue_ingest_job("record", "beta", {"token": "q"})
    query(database_url, "UPDATE ingest_jobs SET status = 'completed', finished_at = now() WHERE id = 1")
    query(database_url, "UPDATE ingest_jobs SET status = 'completed', finished_at = now() - interval '3 minutes 10 seconds' WHERE id = 2")
    html = client.get("/").text
    row = html[html.index('<tr data-queue="beta">'):]
    row = row[:row.index("</tr>")]
    assert '<td class="n" data-f="queued">1</td>' in row and "1 / 2 / 2" in row
    assert 'data-per-minute="[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1]"' in row, row


def test_static_files_are_vendored_and_pages_send_a_strict_policy(read_only: TestClient) -> None:
    for name in ("htmx.min.js", "uPlot.iife.min.js", "uPlot.min.css", "dashboard.js", "dashboard.css"):
        assert read_only.get(f"/static/{name}").status_code == 200, name
    headers = read_only.get("/").headers
    assert "default-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"


def test_layered_layout_of_a_diamond() -> None:
    nodes = [{"id": n, "deps": d, "status": "pending"} for n, d in (("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"]))]
    assert graph.layers(nodes) == {"a": 0, "b": 1, "c": 1, "d": 2}
    out = graph.layout(nodes)
    x = {b.id: b.x for b in out.boxes}
    assert x["a"] < x["b"] == x["c"] < x["d"] and len(out.edges) == 4
    assert len({(b.x, b.y) for b in out.boxes}) == 4, "no two boxes overlap"


def test_layers_of_a_long_chain_and_of_a_cycle_need_no_recursion() -> None:
    chain = [{"id": f"n{i}", "deps": [f"n{i - 1}"] if i else []} for i in range(5000)]
    assert graph.layers(chain)["n4999"] == 4999
    assert graph.layers([{"id": "a", "deps": ["b"]}, {"id": "b", "deps": ["a"]}, {"id": "c", "deps": []}]) == {"a": 1, "b": 1, "c": 0}


def test_a_run_too_big_to_draw_keeps_its_table(client: TestClient, database_url: str) -> None:
    from queue_workflows.dag import Workflow

    wf = Workflow("wide")
    for i in range(401):
        wf.node(f"n{i}", "qw_dag_nodes:echo")
    run_id = queue_workflows.start_run(wf, {})
    page = client.get(f"/runs/{run_id}").text
    assert 'id="dag-too-big"' in page and "401 nodes" in page and "<svg" not in page
    assert page.count('<tr data-node="') == 401


def test_the_password_comes_from_the_settings_and_logout_ends_the_session(database_url: str) -> None:
    from procs import TEST_INGEST_QUEUES

    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, dashboard_password="from-settings")
    with TestClient(create_app(), base_url=LOCAL) as c:
        token = csrf_of(c.get("/login").text)
        response = c.post("/login", data={"csrf": token, "name": "", "password": "from-settings"}, follow_redirects=False)
        assert response.status_code == 303
        cookie = response.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert "operator · " in c.get("/").text, "a blank name is recorded as 'operator'"
        c.post("/logout", data={"csrf": _page_token(c)})
        assert c.post("/actions/worker", data={"host": "h", "queue": "fetch", "op": "on", "csrf": _page_token(c)}).status_code == 401
    assert _controls(database_url) == []


def test_a_database_that_does_not_answer_is_a_503_page_not_a_traceback(database_url: str) -> None:
    from dashboard_helpers import free_port
    from procs import TEST_INGEST_QUEUES

    queue_workflows.configure(database_url=f"postgresql://nobody@127.0.0.1:{free_port()}/none?connect_timeout=2", ingest_queues=TEST_INGEST_QUEUES)
    with TestClient(create_app(), base_url=LOCAL, raise_server_exceptions=False) as c:
        for path in ("/", "/runs", "/jobs", "/runs/1", "/jobs/ingest:1"):
            response = c.get(path)
            assert response.status_code == 503 and "the database is not answering" in response.text, (path, response.text[-500:])
        assert c.get("/healthz").status_code == 503


def test_the_password_is_read_from_the_docker_secret(tmp_path) -> None:
    from queue_workflows.settings import Settings

    (tmp_path / "qw_dashboard_password").write_text("from-a-secret")
    settings = Settings(_secrets_dir=tmp_path)  # type: ignore[call-arg]
    assert settings.dashboard_password is not None and settings.dashboard_password.get_secret_value() == "from-a-secret"
    assert "from-a-secret" not in repr(settings), "a SecretStr never prints"
    assert settings.dashboard_addr == "127.0.0.1"


def test_the_run_page_shows_a_maps_progress_not_its_items(client: TestClient, database_url: str, conn) -> None:
    from queue_workflows.dag.outbox import DispatchDrain

    run_id = queue_workflows.start_run({"name": "fan", "nodes": [
        {"id": "m", "kind": "map", "call": "qw_map_nodes:square", "over": [1, 2, 3], "max_parallel": 2}]}, {})
    first = query(database_url, "SELECT id FROM workflow_node_jobs WHERE map_node = 'm' ORDER BY map_index LIMIT 1")[0]["id"]
    node_queue.mark_completed(first, {"sq": 1}, conn=conn)
    DispatchDrain().drain_once(conn)
    for path in (f"/runs/{run_id}", f"/runs/{run_id}/live"):
        page = client.get(path).text
        assert '<span class="map-progress" data-map="m"' in page and ">1/0/0 of 3</span>" in page, page
        assert page.count("<g class=\"node") == 1 and "m[0]" not in page



def test_a_hub_task_that_ignores_its_cancel_cannot_hold_the_shutdown(monkeypatch):
    # A hub task that never ended once held a TestClient's exit (the server's shutdown) for 120 s.
    from qw_services.dashboard import live

    monkeypatch.setattr(live, "STOP_SECONDS", 0.3)

    async def scenario() -> float:
        hub = live.Hub("dbname=unused", dict)
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await release.wait()

        hub._tasks = [asyncio.create_task(stubborn())]
        await asyncio.sleep(0.05)
        started = time.monotonic()
        try:
            await asyncio.wait_for(hub.stop(), timeout=3.0)
            return time.monotonic() - started
        finally:
            release.set()
            await asyncio.gather(*hub._tasks, return_exceptions=True)

    assert asyncio.run(scenario()) < 2.0
