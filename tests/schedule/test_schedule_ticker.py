"""The ticker on a virtual clock (`now_fn`/`sleep_fn`) against the real slot ledger."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import queue_workflows
from queue_workflows import tasks
from queue_workflows.schedule import ScheduleEntry, SlotStore, Ticker, set_ingest_schedule
from queue_workflows.schedule.clock import Clock
from queue_workflows.schedule.slots import Fire
from queue_workflows.schedule.ticker import MAX_SLEEP, MIN_SLEEP

UTC = UTC
START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def fetch(reason, args):
    return {"reason": reason, "args": args}


class VirtualClock:
    """Time passes only by sleeping; sleeping past `until` says stop."""

    def __init__(self, start: datetime, until: datetime | None = None, skew: timedelta = timedelta(0)) -> None:
        self.t = start
        self.until = until
        self.skew = skew
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self.t + self.skew

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.t += timedelta(seconds=seconds)
        return self.until is not None and self.t >= self.until


@pytest.fixture
def app(database_url):
    queue_workflows.register_ingest_task("fetch", fetch)
    return database_url


def ticker(entries, clock: VirtualClock, replica: str = "r1") -> Ticker:
    return Ticker(entries, SlotStore(replica=replica), clock.now, clock.sleep)


def jobs(conn) -> list[dict]:
    return conn.execute("SELECT id, task_name, queue, args, reason FROM ingest_jobs ORDER BY id").fetchall()


def ledger(conn) -> list[dict]:
    return conn.execute("SELECT entry_name, slot_time, kind, job_id, enqueued_by FROM schedule_slots ORDER BY slot_time, entry_name").fetchall()


def test_fires_each_slot_once_with_args_and_a_reason_naming_it(app, conn):
    entries = [
        ScheduleEntry("hourly", 37, "fetch", "fetch", args={"url": "https://example.invalid"}),
        ScheduleEntry.cron("*/20 * * * *", "every20", "fetch", "load"),
    ]
    clock = VirtualClock(START, until=START + timedelta(hours=2, minutes=50))
    assert ticker(entries, clock).run_forever() == 0
    got = [(j["reason"], j["queue"], j["args"]) for j in jobs(conn)]
    assert got == [
        ("schedule every20@2024-05-01T12:00:00Z", "load", {}),
        ("schedule every20@2024-05-01T12:20:00Z", "load", {}),
        ("schedule hourly@2024-05-01T12:37:00Z", "fetch", {"url": "https://example.invalid"}),
        ("schedule every20@2024-05-01T12:40:00Z", "load", {}),
        ("schedule every20@2024-05-01T13:00:00Z", "load", {}),
        ("schedule every20@2024-05-01T13:20:00Z", "load", {}),
        ("schedule hourly@2024-05-01T13:37:00Z", "fetch", {"url": "https://example.invalid"}),
        ("schedule every20@2024-05-01T13:40:00Z", "load", {}),
        ("schedule every20@2024-05-01T14:00:00Z", "load", {}),
        ("schedule every20@2024-05-01T14:20:00Z", "load", {}),
        ("schedule hourly@2024-05-01T14:37:00Z", "fetch", {"url": "https://example.invalid"}),
        ("schedule every20@2024-05-01T14:40:00Z", "load", {}),
    ]
    rows = ledger(conn)
    assert [r["job_id"] for r in rows] == [j["id"] for j in sorted(jobs(conn), key=lambda j: j["reason"].split("@")[1])]
    assert {r["kind"] for r in rows} == {"slot"} and {r["enqueued_by"] for r in rows} == {"r1"}


def test_sleeps_to_the_next_slot_and_never_spins(app, conn):
    clock = VirtualClock(START + timedelta(seconds=1), until=START + timedelta(hours=3))
    ticker([ScheduleEntry("hourly", 37, "fetch", "fetch")], clock).run_forever()
    assert all(MIN_SLEEP <= s <= MAX_SLEEP for s in clock.sleeps)
    assert len(clock.sleeps) <= 3 * 3600 / MAX_SLEEP + 4, "at most one wake per MAX_SLEEP, plus one per slot"
    assert len(jobs(conn)) == 3


class SlowStore(SlotStore):
    """Each of the first `slow` fires takes `took` of the virtual clock's time."""

    def __init__(self, clock: VirtualClock, took: timedelta, slow: int) -> None:
        super().__init__(replica="r1")
        self.clock, self.took, self.slow = clock, took, slow

    def fire(self, entry, fire):
        if self.slow > 0:
            self.slow -= 1
            self.clock.t += self.took
        return super().fire(entry, fire)


def test_a_slot_that_comes_due_during_a_slow_tick_fires_at_once(app, conn):
    clock = VirtualClock(START, until=START + timedelta(minutes=4, seconds=30))
    store = SlowStore(clock, took=timedelta(seconds=70), slow=1)
    Ticker([ScheduleEntry.cron("* * * * *", "minutely", "fetch", "fetch")], store, clock.now, clock.sleep).run_forever()
    rows = ledger(conn)
    assert [r["slot_time"] for r in rows] == [START + timedelta(minutes=m) for m in range(5)], "12:01 came due while 12:00 was firing"
    assert {r["kind"] for r in rows} == {"slot"}, "ten seconds late is within the grace: on time"


def test_a_stop_during_the_sleep_ends_the_loop_at_once(app):
    stop = threading.Event()
    store = SlotStore()
    clock = Clock(store.db_now, stop)
    t = Ticker([ScheduleEntry("hourly", 37, "fetch", "fetch")], store, clock.now, clock.sleep)
    thread = threading.Thread(target=t.run_forever)
    thread.start()
    time.sleep(0.3)
    began = time.monotonic()
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - began < 1.0


def test_two_replicas_with_skewed_clocks_enqueue_each_slot_once(app, conn):
    entries = [ScheduleEntry.cron("*/5 * * * *", "five", "fetch", "fetch"), ScheduleEntry("hourly", 0, "fetch", "load")]
    fast = VirtualClock(START, skew=timedelta(seconds=25))
    slow = VirtualClock(START, skew=timedelta(seconds=-25))
    a, b = ticker(entries, fast, "fast"), ticker(entries, slow, "slow")
    for step in range(0, 2 * 3600, 10):  # both tick every 10 s of shared time, for two hours
        for clock, replica in ((fast, a), (slow, b)) if step % 20 else ((slow, b), (fast, a)):
            clock.t = START + timedelta(seconds=step)
            replica.tick(clock.now())
    rows = ledger(conn)
    five = [r["slot_time"] for r in rows if r["entry_name"] == "five"]
    # the slow replica reaches 14:00 at 14:00:25 shared time, past the 2 h loop: the fast one took it
    assert five == [START + timedelta(minutes=m) for m in range(0, 121, 5)]
    assert [r["slot_time"] for r in rows if r["entry_name"] == "hourly"] == [START + timedelta(hours=h) for h in range(3)]
    assert len(jobs(conn)) == len(rows) == len({j["reason"] for j in jobs(conn)})
    assert {r["enqueued_by"] for r in rows} == {"fast"}, "the fast clock always got there first; the slow one found each slot taken"


def test_catch_up_policies_after_an_outage(app, conn, caplog):
    entries = [
        ScheduleEntry("skipper", 37, "fetch", "fetch", catch_up="skip"),
        ScheduleEntry("latest", 37, "fetch", "load", catch_up="latest"),
    ]
    before = VirtualClock(START, until=START + timedelta(hours=1, minutes=40))
    ticker(entries, before).run_forever()  # 12:37 and 13:37 fire, then the scheduler is down
    assert len(jobs(conn)) == 4
    after = VirtualClock(START + timedelta(hours=5, minutes=50), until=START + timedelta(hours=6, minutes=40))
    with caplog.at_level(logging.WARNING, logger="queue_workflows.scheduler"):
        ticker(entries, after, "r2").run_forever()  # back at 17:50: 14:37 .. 17:37 were missed
    rows = [(r["entry_name"], r["slot_time"].strftime("%H:%M"), r["kind"]) for r in ledger(conn)]
    assert rows == [
        ("latest", "12:37", "slot"), ("skipper", "12:37", "slot"),
        ("latest", "13:37", "slot"), ("skipper", "13:37", "slot"),
        ("latest", "17:37", "catch_up"),  # the most recent missed slot, once; never 14:37..16:37
        ("latest", "18:37", "slot"), ("skipper", "18:37", "slot"),
    ]
    assert "schedule entry 'skipper': slot 2024-05-01T17:37:00Z was missed" in caplog.text
    assert jobs(conn)[4]["reason"] == "schedule latest@2024-05-01T17:37:00Z (catch-up)"


def test_a_restart_within_the_grace_runs_the_slot_as_on_time(app, conn):
    entries = [ScheduleEntry("skipper", 37, "fetch", "fetch", catch_up="skip")]
    ticker(entries, VirtualClock(START, until=START + timedelta(minutes=40))).run_forever()
    ticker(entries, VirtualClock(START + timedelta(hours=3, minutes=37, seconds=30), until=START + timedelta(hours=3, minutes=38))).run_forever()
    assert [(r["slot_time"].strftime("%H:%M"), r["kind"]) for r in ledger(conn)] == [("12:37", "slot"), ("15:37", "slot")]


def test_boot_kick_runs_once_across_replicas_per_boot_window(app, conn):
    entries = [ScheduleEntry("kick", 37, "fetch", "fetch", boot=True)]
    for replica, offset in (("a", 0), ("b", 2), ("c", 120)):  # three replicas booting within 2 minutes
        ticker(entries, VirtualClock(START + timedelta(seconds=offset)), replica).tick(START + timedelta(seconds=offset))
    boots = [r for r in ledger(conn) if r["kind"] == "boot"]
    assert [(r["slot_time"], r["enqueued_by"]) for r in boots] == [(START, "a")]
    later = START + timedelta(minutes=10)  # past the 300 s boot window: a restart kicks again
    ticker(entries, VirtualClock(later), "d").tick(later)
    assert [r["enqueued_by"] for r in ledger(conn) if r["kind"] == "boot"] == ["a", "d"]
    assert [j["reason"] for j in jobs(conn)] == ["schedule kick@2024-05-01T12:00:00Z (boot)", "schedule kick@2024-05-01T12:10:00Z (boot)"]


def test_a_bad_entry_at_fire_time_is_logged_and_the_others_keep_firing(app, conn, caplog):
    queue_workflows.register_ingest_task("doomed", fetch)
    entries = [ScheduleEntry("doomed", 37, "doomed", "fetch"), ScheduleEntry("fine", 37, "fetch", "load")]
    set_ingest_schedule(entries)
    tasks.clear_ingest_tasks()  # the app stopped registering `doomed` after the schedule was set
    queue_workflows.register_ingest_task("fetch", fetch)
    clock = VirtualClock(START, until=START + timedelta(hours=2))
    with caplog.at_level(logging.ERROR, logger="queue_workflows.scheduler"):
        assert ticker(entries, clock).run_forever() == 0
    assert [j["reason"] for j in jobs(conn)] == ["schedule fine@2024-05-01T12:37:00Z", "schedule fine@2024-05-01T13:37:00Z"]
    assert "schedule entry 'doomed': slot 2024-05-01T12:37:00Z not enqueued: ingest task 'doomed' is not registered" in caplog.text
    assert [r["entry_name"] for r in ledger(conn)] == ["fine", "fine"], "the failed slot left no ledger row"


class FlakyStore(SlotStore):
    def __init__(self, failures: int) -> None:
        super().__init__(replica="flaky")
        self.failures = failures

    def fire(self, entry, fire):
        if self.failures:
            self.failures -= 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return super().fire(entry, fire)


def test_a_database_error_backs_off_and_retries_the_slot(app, conn, caplog):
    clock = VirtualClock(START + timedelta(minutes=36, seconds=59), until=START + timedelta(minutes=40))
    t = Ticker([ScheduleEntry("hourly", 37, "fetch", "fetch")], FlakyStore(failures=3), clock.now, clock.sleep)
    with caplog.at_level(logging.WARNING, logger="queue_workflows.scheduler"):
        assert t.run_forever() == 0
    assert [j["reason"] for j in jobs(conn)] == ["schedule hourly@2024-05-01T12:37:00Z"]
    assert caplog.text.count("database error") == 3


def test_the_scaled_clock_compresses_time_for_tests():
    origin = datetime(2024, 1, 1, tzinfo=UTC)
    real = [origin + timedelta(seconds=10)]
    stop = threading.Event()
    clock = Clock(lambda: real[0], stop, scale=60, origin=origin)
    assert clock.now() == origin + timedelta(minutes=10)
    began = time.monotonic()
    assert clock.sleep(6) is False and 0.08 < time.monotonic() - began < 0.5, "6 clock seconds = 0.1 s"
    stop.set()
    assert clock.sleep(3600) is True


def test_the_store_fires_a_slot_once(app, conn):
    entry = ScheduleEntry("hourly", 37, "fetch", "fetch", args={"n": 1})
    slot = Fire(START + timedelta(minutes=37), "slot")
    first = SlotStore(replica="a").fire(entry, slot)
    assert first is not None and first["args"] == {"n": 1}
    assert SlotStore(replica="b").fire(entry, slot) is None
    assert [(r["job_id"], r["enqueued_by"]) for r in ledger(conn)] == [(first["id"], "a")]
