"""The scheduler in-process: `main()`, `run()`, and the listing behind `qw schedule`."""

from __future__ import annotations

import json
import logging
import signal
import threading
from datetime import UTC, datetime

import pytest

import queue_workflows
from queue_workflows import ConfigError, scheduler, tasks
from queue_workflows.schedule.service import usable_entries
from queue_workflows.scheduler import ScheduleEntry, schedule_status, set_ingest_schedule


def noop(reason):
    return {"reason": reason}


@pytest.fixture
def app(database_url):
    queue_workflows.register_ingest_task("noop", noop)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield database_url
    for signum, handler in handlers.items():  # main() installs its own; give pytest its Ctrl-C back
        signal.signal(signum, handler)


def test_main_once_runs_the_boot_kicks_in_process(app, conn):
    set_ingest_schedule([ScheduleEntry("kick", 0, "noop", "fetch", hours={3}, boot=True)])
    assert scheduler.main(["--once"]) == 0
    assert scheduler.main(["--once"]) == 0, "a second start within the boot window kicks nothing"
    rows = conn.execute("SELECT reason FROM ingest_jobs WHERE reason LIKE %s", ("%(boot)",)).fetchall()  # 03:00 itself adds a slot job
    assert len(rows) == 1 and rows[0]["reason"].startswith("schedule kick@"), rows


def test_main_without_a_schedule_is_one_clear_error(app, capsys):
    assert scheduler.main(["--once"]) == 2
    assert "no usable schedule entries" in capsys.readouterr().err


def test_run_stops_when_asked(app, conn):
    set_ingest_schedule([ScheduleEntry("kick", 0, "noop", "fetch", boot=True)])
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,))
    thread.start()
    try:
        from procs import wait_until

        # Counted by kind: run just after a full hour, minute 0's slot is due too (a second job).
        wait_until(lambda: conn.execute("SELECT count(*) AS n FROM ingest_jobs WHERE reason LIKE %s", ("%(boot)",)).fetchone()["n"] == 1,
                   timeout=10, what="the boot kick")
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_bad_entry_is_left_out_at_start_and_the_rest_runs(app, caplog):
    queue_workflows.register_ingest_task("gone", noop)
    good, bad = ScheduleEntry("good", 1, "noop", "fetch"), ScheduleEntry("bad", 1, "gone", "fetch")
    set_ingest_schedule([good, bad])
    tasks.clear_ingest_tasks()
    queue_workflows.register_ingest_task("noop", noop)
    with caplog.at_level(logging.ERROR, logger="queue_workflows.scheduler"):
        assert usable_entries(scheduler.ingest_schedule()) == [good]
    assert "schedule entry 'bad': ingest task 'gone' is not registered" in caplog.text
    with pytest.raises(ConfigError, match="no usable schedule entries"):
        scheduler.run(threading.Event(), [bad])


def test_status_lists_next_fire_and_last_slot(app, conn):
    entries = [
        ScheduleEntry("hourly", 37, "noop", "fetch", catch_up="latest"),
        ScheduleEntry.cron("0 6 * * *", "daily", "noop", "load", timezone="Europe/Berlin", boot=True),
    ]
    set_ingest_schedule(entries)
    conn.execute(
        "INSERT INTO schedule_slots (entry_name, slot_time, kind, task_name, queue, job_id, enqueued_by) "
        "VALUES ('hourly', '2024-05-01T12:37:00Z', 'slot', 'noop', 'fetch', 42, 'h:1')"
    )
    rows = schedule_status()
    now = datetime.now(UTC)
    assert [r["name"] for r in rows] == ["hourly", "daily"]
    hourly, daily = rows
    assert (hourly["last_slot"], hourly["last_kind"], hourly["last_job_id"]) == ("2024-05-01T12:37:00Z", "slot", 42)
    assert hourly["cron"] == "37 * * * *" and hourly["timezone"] == "UTC" and hourly["catch_up"] == "latest"
    next_fire = datetime.strptime(hourly["next_fire"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert next_fire.minute == 37 and 0 < (next_fire - now).total_seconds() <= 3600
    assert daily["last_slot"] is None and daily["timezone"] == "Europe/Berlin" and daily["boot"] is True
    assert daily["next_fire"].endswith(("04:00:00Z", "05:00:00Z")), "06:00 in Berlin"


def test_qw_schedule_lists_entries_as_a_table_and_as_json(app, conn, capsys):
    from qw_services import cli

    assert cli.main(["schedule"]) == 0
    assert "no schedule entries" in capsys.readouterr().out
    set_ingest_schedule([ScheduleEntry("hourly", 37, "noop", "fetch", boot=True), ScheduleEntry.cron("*/5 * * * *", "five", "noop", "load")])
    assert scheduler.main(["--once"]) == 0  # the boot kick: hourly's last slot
    capsys.readouterr()
    assert cli.main(["schedule", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    hourly_job = conn.execute("SELECT id FROM ingest_jobs WHERE reason LIKE 'schedule hourly@%%'").fetchone()  # "five" may fire too
    assert rows["hourly"]["last_kind"] == "boot" and rows["hourly"]["last_job_id"] == hourly_job["id"]
    assert rows["five"]["cron"] == "*/5 * * * *" and rows["five"]["last_kind"] in (None, "slot"), "a slot only if one is due right now"
    assert cli.main(["schedule"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines[0][:4] == ["name", "task", "queue", "cron"]
    assert ["hourly", "noop", "fetch", "37", "*", "*", "*", "*", "UTC", "skip", "yes"] in [line[:11] for line in lines], lines
