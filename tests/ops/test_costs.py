"""`qw costs` against the real Postgres: every grouping matches sums computed here, in Python, from the raw job rows.

Jobs are enqueued, stamped with their usage and marked through the engine's own statements (the
ones a worker sends); only the claim (which worker, hence which host) and the finish times are set
by hand, so the window can be tested. The expected figures are computed from `SELECT *` of the two
job tables, never from the report's SQL.
"""

from __future__ import annotations

import csv
import io
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from procs import query

from queue_workflows import db, jobstore, node_queue, register_ingest_task
from queue_workflows.node_queue import INGEST_TABLE, NODE_TABLE
from queue_workflows.ops import admin, costs
from queue_workflows.worker.usage import Usage
from qw_services import cli

HOSTS = ("box-a", "box-b", "gpu-1")
TENANTS = ("acme", "globex", "default")
MODELS = ("llama", "whisper", None)
NOW = datetime.now(UTC)


def _finish(url: str, table: Any, job_id: int, *, host: str, usage: Usage, outcome: str, finished_at: datetime) -> None:
    worker = f"{host}:q:{job_id}:abc"
    name = "ingest_jobs" if table == INGEST_TABLE else "workflow_node_jobs"
    with db.transaction() as conn:  # the claim, by hand: this worker on this host
        conn.execute(f"UPDATE {name} SET status = 'running', claimed_by = %s, started_at = now() WHERE id = %s", (worker, job_id))  # noqa: S608 - fixed names
        for statement, params in (usage.statement(table, job_id, worker),
                                  jobstore.mark_statement(table, outcome, job_id, result=None,
                                                          error="boom" if outcome == "failed" else None, worker_id=worker)):
            assert conn.execute(statement, params).rowcount == 1
    query(url, f"UPDATE {name} SET finished_at = %s WHERE id = %s", (finished_at, job_id))  # noqa: S608


def _usage(rng: random.Random, gpu: bool) -> Usage:
    hit = rng.choice((True, False, None)) if gpu else None
    return Usage(cpu_seconds=round(rng.uniform(0, 50), 3), peak_rss_bytes=rng.randrange(10**8, 4 * 10**9), wall_seconds=round(rng.uniform(0.1, 90), 3),
                 peak_vram_bytes=rng.randrange(10**9, 40 * 10**9) if gpu and rng.random() < 0.9 else None,
                 model_load_seconds=round(rng.uniform(1, 20), 3) if hit is False else (0.0 if hit else None), model_hit=hit)


@pytest.fixture
def jobs(database_url: str) -> str:
    """Ingest, cpu-node and gpu-node jobs over 3 tenants, hosts and models, finished across 10 days, some failed or cancelled."""
    rng = random.Random(26)
    register_ingest_task("crawl", lambda reason: {})
    register_ingest_task("parse", lambda reason: {})
    for i in range(60):
        kind = rng.choice(("ingest", "cpu", "gpu"))
        tenant = rng.choice(TENANTS)
        finished_at = NOW - timedelta(hours=rng.uniform(0.1, 240))
        if kind == "ingest":
            row = node_queue.enqueue_ingest_job(rng.choice(("crawl", "parse")), rng.choice(("fetch", "load")), tenant=tenant)
            table = INGEST_TABLE
        else:
            row = node_queue.enqueue_node_job("qw_test_nodes", kind, required_model=rng.choice(MODELS) if kind == "gpu" else None,
                                              tenant=tenant, gpus=rng.choice((1, 1, 2, 4)) if kind == "gpu" else 1)
            table = NODE_TABLE
        if i % 11 == 5:  # cancelled before it ran: no host, no usage
            admin.cancel_job(f"{'ingest' if table == INGEST_TABLE else 'node'}:{row['id']}")
            query(database_url, f"UPDATE {'ingest_jobs' if table == INGEST_TABLE else 'workflow_node_jobs'} SET finished_at = %s WHERE id = %s",  # noqa: S608
                  (finished_at, row["id"]))
            continue
        _finish(database_url, table, row["id"], host=rng.choice(HOSTS), usage=_usage(rng, kind == "gpu"),
                outcome="failed" if rng.random() < 0.2 else "completed", finished_at=finished_at)
    node_queue.enqueue_ingest_job("crawl", "fetch", tenant="acme")  # still queued: never counted
    return database_url


def _raw(url: str) -> list[dict[str, Any]]:
    """Every finished job as the report should see it, keyed the report's five ways."""
    out = []
    for row in query(url, "SELECT * FROM ingest_jobs WHERE status IN ('completed', 'failed', 'cancelled')"):
        out.append({**row, "task": row["task_name"], "model": None, "gpu_seconds": 0.0})
    for row in query(url, "SELECT * FROM workflow_node_jobs WHERE status IN ('completed', 'failed', 'cancelled')"):
        gpu = (row["wall_seconds"] or 0.0) * row["gpus"] if row["queue"] == "gpu" else 0.0
        out.append({**row, "task": f"{row['node_module'] + '/' if row['node_module'] else ''}{row['node_name']}", "model": row["required_model"], "gpu_seconds": gpu})
    for row in out:
        row["host"] = row["claimed_by"].split(":")[0] if row["claimed_by"] else None
    return out


def _pct(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (what percentile_cont computes)."""
    if not values:
        return None
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    low = int(pos)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (pos - low)


def _expected(rows: list[dict[str, Any]]) -> dict[str, Any]:
    vram = [r["peak_vram_bytes"] for r in rows if r["peak_vram_bytes"] is not None]
    rss = [r["peak_rss_bytes"] for r in rows if r["peak_rss_bytes"] is not None]
    hits = sum(1 for r in rows if r["model_hit"] is True)
    loads = sum(1 for r in rows if r["model_hit"] is False)
    return {
        "jobs": len(rows),
        "completed": sum(r["status"] == "completed" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
        "cancelled": sum(r["status"] == "cancelled" for r in rows),
        "cpu_seconds": sum(r["cpu_seconds"] or 0 for r in rows),
        "gpu_seconds": sum(r["gpu_seconds"] for r in rows),
        "wall_seconds": sum(r["wall_seconds"] or 0 for r in rows),
        "peak_vram_p50_bytes": _pct(vram, 0.5), "peak_vram_p95_bytes": _pct(vram, 0.95),
        "peak_vram_max_bytes": max(vram) if vram else None, "peak_rss_p95_bytes": _pct(rss, 0.95),
        "model_load_seconds": sum(r["model_load_seconds"] or 0 for r in rows),
        "model_loads": loads, "model_hits": hits, "model_hit_rate": hits / (hits + loads) if hits + loads else None,
    }


def _same(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    for key, value in want.items():
        if value is None or isinstance(value, int):
            assert got[key] == value, f"{where}: {key} is {got[key]!r}, the rows say {value!r}"
        else:
            assert got[key] == pytest.approx(value, rel=1e-9), f"{where}: {key} is {got[key]!r}, the rows say {value!r}"


@pytest.mark.parametrize("by", costs.GROUP_BY)
def test_every_grouping_matches_the_rows(jobs, by, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", jobs)
    since = NOW - timedelta(days=30)
    rows = [r for r in _raw(jobs) if r["finished_at"] >= since]
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[by], []).append(r)
    assert len(groups) >= 2, "the fixture must spread the jobs over several groups"
    assert cli.main(["costs", "--by", by, "--since", "30d", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["by"] == by and not report["truncated"]
    assert sorted(map(str, (g["group"] for g in report["groups"]))) == sorted(map(str, groups)), report["groups"]
    for g in report["groups"]:
        _same(g, _expected(groups[g["group"]]), f"--by {by} group {g['group']!r}")
    _same(report["totals"], _expected(rows), f"--by {by} totals")


def test_since_and_until_bound_the_window(jobs, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", jobs)
    start, end = NOW - timedelta(days=5), NOW - timedelta(days=2)
    rows = [r for r in _raw(jobs) if start <= r["finished_at"] < end]
    assert 0 < len(rows) < len(_raw(jobs))
    assert cli.main(["costs", "--by", "queue", "--since", start.isoformat(), "--until", end.isoformat(), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    _same(report["totals"], _expected(rows), "--since/--until totals")
    recent = [r for r in _raw(jobs) if r["finished_at"] >= datetime.now(UTC) - timedelta(days=1)]
    assert cli.main(["costs", "--by", "tenant", "--since", "1d", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["jobs"] == len(recent)


def test_csv_is_the_json_report_as_chargeback_rows(jobs, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", jobs)
    assert cli.main(["costs", "--by", "host", "--since", "30d", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert cli.main(["costs", "--by", "host", "--since", "30d", "--csv"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == ",".join(costs.CSV_COLUMNS)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [r["group"] for r in parsed] == ["" if g["group"] is None else g["group"] for g in report["groups"]]
    for row, group in zip(parsed, report["groups"], strict=True):
        assert row["by"] == "host"
        assert float(row["gpu_seconds"]) == pytest.approx(group["gpu_seconds"]) and int(row["jobs"]) == group["jobs"]
        assert row["peak_vram_p95_bytes"] == ("" if group["peak_vram_p95_bytes"] is None else str(group["peak_vram_p95_bytes"]))
        assert abs(datetime.fromisoformat(row["since"]) - datetime.fromisoformat(report["since"])) < timedelta(seconds=60)  # 30d back from each call's now


def test_the_table_shows_every_group_and_the_total(jobs, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", jobs)
    assert cli.main(["costs", "--by", "tenant", "--since", "30d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    firsts = [line.split()[0] for line in lines if line.split()]
    for tenant in TENANTS:
        assert tenant in firsts, lines
    total = next(line for line in lines if line.split() and line.split()[0] == "total")
    rows = [r for r in _raw(jobs) if r["finished_at"] >= NOW - timedelta(days=30)]
    assert total.split()[1] == str(len(rows)), total


@pytest.mark.parametrize(("argv", "message"), [
    (["--since", "7x"], "--since '7x' is not a time"),
    (["--until", "yesterday"], "--until 'yesterday' is not a time"),
    (["--by", "colour"], "--by 'colour' is not a grouping: use one of tenant, queue, task, model, host"),
    (["--since", "1d", "--until", "2d"], "must be before --until"),
])
def test_bad_input_is_one_clear_error_and_exit_2(database_url, argv, message, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    assert cli.main(["costs", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and message in captured.err and len(captured.err.splitlines()) == 1, captured.err


def test_a_narrow_window_reads_the_finished_index_on_a_big_table(database_url):
    """120,000 finished jobs over a year: a day's report walks the finished_at indexes, not the tables."""
    query(database_url, """INSERT INTO ingest_jobs (task_name, queue, status, finished_at, cpu_seconds, wall_seconds, claimed_by)
                           SELECT 'crawl', 'fetch', 'completed', now() - (i * interval '1 minute') * 8.76, 1, 2, 'h:fetch:1:x'
                             FROM generate_series(1, 60000) i""")
    query(database_url, """INSERT INTO workflow_node_jobs (node_name, queue, status, finished_at, cpu_seconds, wall_seconds)
                           SELECT 'n', 'gpu', 'completed', now() - (i * interval '1 minute') * 8.76, 1, 2
                             FROM generate_series(1, 60000) i""")
    query(database_url, "ANALYZE ingest_jobs")
    query(database_url, "ANALYZE workflow_node_jobs")
    since, until = NOW - timedelta(days=1), NOW
    with db.transaction() as conn:
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + costs._COSTS["cost_report"],  # noqa: SLF001 - the report's own statement
                                                    {"by": "queue", "since": since, "until": until, "limit": 10}).fetchall())
    assert "ingest_jobs_finished_idx" in plan and "workflow_node_jobs_outcome_idx" in plan, plan
    assert "Seq Scan" not in plan, plan
    report = costs.cost_report(by="queue", since="1d")
    assert report["totals"]["jobs"] == pytest.approx(2 * 24 * 60 / 8.76, abs=4)
