"""Child workflow runs as links: `qw run` names the child run of a node and the parent of a child run;
the dashboard's run page links to each, both ways."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest
from dashboard_helpers import LOCAL
from procs import query

import queue_workflows
from queue_workflows import config
from queue_workflows.dag import Workflow
from qw_services import cli

with warnings.catch_warnings():  # Starlette 1.x nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from qw_services.dashboard.app import create_app

N = "qw_dag_nodes"


@pytest.fixture
def family(database_url: str) -> tuple[int, int]:
    """A parent run whose node 'sub' waits on its child run, and that child's id."""
    inner = Workflow("inner").node("x", f"{N}:echo")
    parent = queue_workflows.start_run(Workflow("outer").node("a", f"{N}:echo").child("sub", inner), {})
    [child] = query(database_url, "SELECT id FROM workflow_runs WHERE parent_run_id = %s", (parent,))
    return parent, child["id"]


def test_qw_run_prints_the_child_run_of_a_node_and_the_parent_of_a_child(database_url, family, capsys, monkeypatch):
    parent, child = family
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()
    assert cli.main(["run", str(parent)]) == 0
    out = capsys.readouterr().out
    assert f"node sub -> child run {child} (running): qw run {child}" in out
    assert f"run:{child}" in out  # the node's row in the table names the run, not a job
    assert cli.main(["run", str(child)]) == 0
    assert f"child of run {parent} (node sub), depth 1: qw run {parent}" in capsys.readouterr().out
    assert cli.main(["run", str(parent), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["nodes"]["sub"]
    assert (shown["child_run_id"], shown["child_status"], shown["status"]) == (child, "running", "waiting")


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(), base_url=LOCAL) as c:
        yield c


def test_the_run_page_links_to_the_child_run_and_back_to_the_parent(client, family):
    parent, child = family
    page = client.get(f"/runs/{parent}").text
    assert f'<a class="child-run" href="/runs/{child}">child run #{child}</a>' in page
    assert f'<a href="/runs/{child}">' in page  # the drawn box too
    assert 'id="run-parent"' not in page
    live = client.get(f"/runs/{parent}/live").text
    assert f'href="/runs/{child}"' in live
    below = client.get(f"/runs/{child}").text
    assert f'child run of <a href="/runs/{parent}">run #{parent}</a>, node <strong>sub</strong>' in below
