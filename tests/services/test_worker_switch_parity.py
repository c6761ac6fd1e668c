"""`queue-worker-control --off|--on` and `qw worker off|on` are one action: for the same request,
valid or not, they print the same thing, exit with the same code and write the same row."""

from __future__ import annotations

import re

import pytest
from procs import query

from queue_workflows import config
from queue_workflows.control import commands
from qw_services import cli

CLOSED_PORT_URL = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"  # discard port: refused at once
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[ T][\d:.+-]+")


@pytest.fixture
def env(database_url, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_INGEST_QUEUES", "fetch,load")
    monkeypatch.setenv("QW_HOST_LABEL", "ops-box")
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()
    return database_url


def _call(main, argv: list[str], capsys) -> tuple[int, str, list[str]]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses before the action runs
        code = exc.code
    out, err = capsys.readouterr()
    # The usage line names each command's own syntax; every other line must be the same.
    lines = [line.replace("queue-worker-control: ", "PROG: ").replace("qw worker: ", "PROG: ")
             for line in err.splitlines() if not line.startswith("usage: ")]
    return code, TIMESTAMP.sub("<time>", out), lines


def _both(url: str, capsys, state: str, *options: str) -> dict[str, tuple]:
    results = {}
    for name, main, argv in (("queue-worker-control", commands.main, [f"--{state}", *options]),
                             ("qw worker", cli.main, ["worker", state, *options])):
        query(url, "DELETE FROM worker_controls")
        code, out, err = _call(main, argv, capsys)
        rows = query(url, "SELECT host_label, queue, desired_state, stop_policy, requested_by, reason FROM worker_controls")
        results[name] = (code, out, err, rows)
    return results


@pytest.mark.parametrize(
    ("state", "options", "code", "needle"),
    [
        ("off", ["--queue", "fetch", "--host", "h1", "--policy", "park", "--reason", "disk swap", "--json"], 0, '"stop_policy": "park"'),
        ("on", ["--queue", "cpu"], 0, "ops-box/cpu: ON"),  # no --host: this host, with a warning
        ("off", ["--queue", "nope", "--host", "h1"], 2, "unknown ingest queue 'nope'"),
        ("off", ["--queue", "fetch", "--policy", "soft"], 2, "argument --policy: invalid choice: 'soft'"),
        ("off", ["--queue", "fetch", "--host"], 2, "argument --host: expected one argument"),
        ("off", ["--queue", "fetch", "--host", ""], 2, "host label '' is invalid"),
        ("on", ["--host", "h1"], 2, "the following arguments are required: --queue"),
    ],
)
def test_both_commands_give_the_same_result_for_the_same_request(env, capsys, state, options, code, needle):
    results = _both(env, capsys, state, *options)
    assert results["queue-worker-control"] == results["qw worker"], results
    got, out, err, rows = results["qw worker"]
    assert got == code and needle in out + "\n".join(err), results
    assert bool(rows) == (code == 0), "a refused request writes nothing"


@pytest.mark.parametrize(("queue", "code", "needle"), [("nope", 2, "unknown ingest queue 'nope'"), ("fetch", 1, "127.0.0.1")])
def test_without_a_database_bad_input_is_still_exit_2_and_a_good_request_exit_1(env, capsys, monkeypatch, queue, code, needle):
    monkeypatch.setenv("QW_DATABASE_URL", CLOSED_PORT_URL)
    config.reset()
    qwc = _call(commands.main, ["--off", "--queue", queue, "--host", "h1"], capsys)
    qw = _call(cli.main, ["worker", "off", "--queue", queue, "--host", "h1"], capsys)
    assert qwc == qw, (qwc, qw)
    assert qw[0] == code and qw[1] == "" and len(qw[2]) == 1 and qw[2][0].startswith("error: ") and needle in qw[2][0], qw
