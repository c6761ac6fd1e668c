"""Ledger views and a compressed clock for the multi-process scheduler invariant tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from procs import query, service_env, wait_until

MINUTE = timedelta(minutes=1)


def scaled_env(url: str, scale: int, **overrides: str) -> dict[str, str]:
    origin = query(url, "SELECT clock_timestamp() AS now")[0]["now"]
    return service_env(url, QW_APP="qw_sched_app", QW_SCHEDULE_TIME_SCALE=str(scale), QW_SCHEDULE_TIME_ORIGIN=origin.isoformat(), **overrides)


def scaled_now(url: str, env: dict[str, str]) -> datetime:
    """The compressed clock's reading, as a scheduler started with `env` sees it."""
    origin, scale = datetime.fromisoformat(env["QW_SCHEDULE_TIME_ORIGIN"]), int(env["QW_SCHEDULE_TIME_SCALE"])
    real = query(url, "SELECT clock_timestamp() AS now")[0]["now"]
    return origin + (real - origin) * scale


def slots(url: str, entry: str) -> list[dict]:
    return query(url, "SELECT * FROM schedule_slots WHERE entry_name = %s ORDER BY slot_time", (entry,))


def wait_slots(url: str, entry: str, count: int, *, timeout: float) -> list[dict]:
    return wait_until(lambda: (rows := slots(url, entry)) and len(rows) >= count and rows, timeout=timeout, interval=0.1, what=f"{count} slots of {entry}")


def assert_each_slot_once_with_its_job(url: str) -> None:
    rows = query(url, "SELECT s.*, j.reason, j.task_name AS job_task FROM schedule_slots s LEFT JOIN ingest_jobs j ON j.id = s.job_id ORDER BY s.slot_time")
    jobs = query(url, "SELECT reason, count(*) AS n FROM ingest_jobs GROUP BY reason")
    assert all(r["job_id"] is not None and r["job_task"] == r["task_name"] for r in rows), "every slot row has its job"
    assert all(j["n"] == 1 for j in jobs), f"a slot enqueued twice: {[j for j in jobs if j['n'] > 1]}"
    assert len(jobs) == len(rows), "every job has its slot row"
    for r in rows:
        assert r["reason"].startswith(f"schedule {r['entry_name']}@{r['slot_time'].astimezone(UTC):%Y-%m-%dT%H:%M:%S}Z")


def minutes_between(rows: list[dict]) -> list[int]:
    times = [r["slot_time"] for r in rows]
    return [round((b - a) / MINUTE) for a, b in zip(times, times[1:])]
