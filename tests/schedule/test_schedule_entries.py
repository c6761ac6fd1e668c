"""Schedule entries: each bad entry gets its own specific error, and a bad schedule changes nothing."""

from __future__ import annotations

import pytest

import queue_workflows
from queue_workflows import ConfigError, InvalidPayloadError, ReservedQueueError, UnknownQueueError, UnknownTaskError
from queue_workflows.scheduler import InvalidScheduleError, ScheduleEntry, ingest_schedule, set_ingest_schedule


def run_fetch_all(reason):
    return {"reason": reason}


@pytest.fixture(autouse=True)
def _configured():
    queue_workflows.configure(ingest_queues=frozenset({"fetch", "ingest"}))
    queue_workflows.register_ingest_task("run_fetch_all", run_fetch_all)


def test_the_seed_calls_work_as_written():
    from queue_workflows.scheduler import ScheduleEntry as FromFace

    assert FromFace is queue_workflows.ScheduleEntry
    queue_workflows.register_ingest_task("run_glofas", run_fetch_all)
    entries = [
        ScheduleEntry("fetch", 37, "run_fetch_all", "fetch"),
        ScheduleEntry("glofas", minute=30, task_name="run_glofas", queue="ingest", hours=frozenset({6})),
    ]
    assert queue_workflows.set_ingest_schedule(entries) == tuple(entries)
    assert ingest_schedule() == tuple(entries)
    assert [e.cron_expression for e in entries] == ["37 * * * *", "30 6 * * *"]


def test_hours_accept_any_collection_and_cron_text_is_normalised():
    assert ScheduleEntry("a", 0, "run_fetch_all", "fetch", hours=[18, 6, 6]).cron_expression == "0 6,18 * * *"
    assert ScheduleEntry.cron("*/5   * * * *", "b", "run_fetch_all", "fetch").cron_expression == "*/5 * * * *"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ScheduleEntry("a", 60, "run_fetch_all", "fetch"), r"'a': minute must be an integer from 0 to 59, not 60"),
        (lambda: ScheduleEntry("a", -1, "run_fetch_all", "fetch"), r"minute must be an integer from 0 to 59"),
        (lambda: ScheduleEntry("a", True, "run_fetch_all", "fetch"), r"minute must be an integer"),
        (lambda: ScheduleEntry("a", "7", "run_fetch_all", "fetch"), r"minute must be an integer"),
        (lambda: ScheduleEntry("a", 7, "run_fetch_all", "fetch", hours={24}), r"hour 24 is out of range"),
        (lambda: ScheduleEntry("a", 7, "run_fetch_all", "fetch", hours=set()), r"no hour given"),
        (lambda: ScheduleEntry("a", 7, "run_fetch_all", "fetch", hours="6"), r"hours must be a set of integers"),
        (lambda: ScheduleEntry.cron("*/5 * * *", "a", "run_fetch_all", "fetch"), r"bad cron text '\*/5 \* \* \*': want 5 fields"),
        (lambda: ScheduleEntry.cron("61 * * * *", "a", "run_fetch_all", "fetch"), r"bad cron text '61 \* \* \* \*': Bad minute"),
        (lambda: ScheduleEntry.cron("0 0 30 2 *", "a", "run_fetch_all", "fetch"), r"bad cron text .*day-of-month"),
        (lambda: ScheduleEntry.cron("@hourly", "a", "run_fetch_all", "fetch"), r"bad cron text"),
        (lambda: ScheduleEntry("a", 7, "run_fetch_all", "fetch", timezone="Mars/Olympus"), r"'Mars/Olympus' is not an IANA time zone"),
        (lambda: ScheduleEntry("a", 7, "run_fetch_all", "fetch", catch_up="all"), r"catch_up must be 'skip' or 'latest'"),
        (lambda: ScheduleEntry("a", 7, "run_fetch_all", "fetch", boot="yes"), r"boot must be True or False"),
        (lambda: ScheduleEntry("bad name", 7, "run_fetch_all", "fetch"), r"the name must be"),
        (lambda: ScheduleEntry("a" * 65, 7, "run_fetch_all", "fetch"), r"the name must be"),
    ],
)
def test_a_malformed_entry_fails_where_it_is_built(make, message):
    with pytest.raises(InvalidScheduleError, match=message):
        make()


@pytest.mark.parametrize(
    ("entry", "error", "message"),
    [
        (ScheduleEntry("a", 7, "run_nothing", "fetch"), UnknownTaskError, r"schedule entry 'a': ingest task 'run_nothing' is not registered \(registered: run_fetch_all\)"),
        (ScheduleEntry("a", 7, "run_fetch_all", "hydro"), UnknownQueueError, r"schedule entry 'a': unknown ingest queue 'hydro' \(configured: fetch, ingest"),
        (ScheduleEntry("a", 7, "run_fetch_all", "gpu"), ReservedQueueError, r"schedule entry 'a': queue 'gpu' is reserved"),
        (ScheduleEntry("a", 7, "run_fetch_all", "fetch", args={"x": object()}), InvalidPayloadError, r"schedule entry 'a': args"),
        (ScheduleEntry("a", 7, "run_fetch_all", "fetch", args=[1]), InvalidPayloadError, r"args must be a JSON object"),
    ],
)
def test_set_ingest_schedule_checks_against_this_process(entry, error, message):
    good = ScheduleEntry("good", 1, "run_fetch_all", "fetch")
    set_ingest_schedule([good])
    with pytest.raises(error, match=message):
        set_ingest_schedule([good, entry])
    assert ingest_schedule() == (good,), "a bad schedule changes nothing"


def test_duplicate_entry_names_are_refused():
    entries = [ScheduleEntry("fetch", 7, "run_fetch_all", "fetch"), ScheduleEntry.cron("0 * * * *", "fetch", "run_fetch_all", "ingest")]
    with pytest.raises(InvalidScheduleError, match=r"duplicate schedule entry name 'fetch'"):
        set_ingest_schedule(entries)


def test_not_an_entry_is_refused():
    with pytest.raises(InvalidScheduleError, match=r"schedule item #1 is a dict, not a ScheduleEntry"):
        set_ingest_schedule([ScheduleEntry("a", 1, "run_fetch_all", "fetch"), {"name": "b"}])  # type: ignore[list-item]
    with pytest.raises(InvalidScheduleError, match="takes a list of ScheduleEntry"):
        set_ingest_schedule(5)  # type: ignore[arg-type]


def test_the_schedule_timezone_setting_is_checked(monkeypatch):
    monkeypatch.setenv("QW_SCHEDULE_TIMEZONE", "Nowhere/Land")
    with pytest.raises(ConfigError, match=r"QW_SCHEDULE_TIMEZONE: 'Nowhere/Land' is not an IANA time zone"):
        queue_workflows.configure()
    monkeypatch.setenv("QW_SCHEDULE_TIMEZONE", "Europe/Berlin")
    assert queue_workflows.configure().settings.schedule_timezone == "Europe/Berlin"
    assert ScheduleEntry("a", 1, "run_fetch_all", "fetch").zone_name() == "Europe/Berlin"


def test_a_time_scale_needs_an_origin(monkeypatch):
    monkeypatch.setenv("QW_SCHEDULE_TIME_SCALE", "60")
    with pytest.raises(ConfigError, match="schedule_time_origin"):
        queue_workflows.configure()
