"""Slot math on a virtual clock: pure functions of the entry, the zone and an instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queue_workflows.schedule.entries import ScheduleEntry
from queue_workflows.schedule.slots import Fire, Slots, decide, reason

UTC = UTC


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def slots_of(entry: ScheduleEntry, zone: str = "UTC") -> Slots:
    return Slots.of(entry.cron_expression, entry.zone_name(zone))


def hourly(minute: int, hours: set[int] | None = None, tz: str | None = None) -> ScheduleEntry:
    return ScheduleEntry("e", minute, "t", "fetch", hours=hours, timezone=tz)


def test_minute_past_every_hour():
    s = slots_of(hourly(37))
    assert s.next_after(at(2024, 5, 1, 12, 0)) == at(2024, 5, 1, 12, 37)
    assert s.next_after(at(2024, 5, 1, 12, 37)) == at(2024, 5, 1, 13, 37), "strictly after"
    assert s.between(at(2024, 5, 1, 12, 0), at(2024, 5, 1, 15, 0)) == [at(2024, 5, 1, h, 37) for h in (12, 13, 14)]


def test_hours_filter_fires_only_in_those_hours():
    s = slots_of(hourly(30, {6, 18}))
    day = s.between(at(2024, 5, 1), at(2024, 5, 3))
    assert day == [at(2024, 5, 1, 6, 30), at(2024, 5, 1, 18, 30), at(2024, 5, 2, 6, 30), at(2024, 5, 2, 18, 30)]
    assert s.latest_at_or_before(at(2024, 5, 2, 6, 29)) == at(2024, 5, 1, 18, 30)


def test_latest_at_or_before_includes_the_instant_itself():
    s = slots_of(hourly(37))
    assert s.latest_at_or_before(at(2024, 5, 1, 12, 37)) == at(2024, 5, 1, 12, 37)
    assert s.latest_at_or_before(at(2024, 5, 1, 12, 37) + timedelta(microseconds=900_000)) == at(2024, 5, 1, 12, 37)
    assert s.latest_at_or_before(at(2024, 5, 1, 12, 36, 59)) == at(2024, 5, 1, 11, 37)


def test_cron_form():
    s = slots_of(ScheduleEntry.cron("*/5 * * * *", "e", "t", "fetch"))
    assert s.between(at(2024, 5, 1, 12, 3), at(2024, 5, 1, 12, 20)) == [at(2024, 5, 1, 12, m) for m in (5, 10, 15, 20)]
    weekdays = slots_of(ScheduleEntry.cron("0 9 * * MON-FRI", "e", "t", "fetch"))
    # 2024-05-03 is a Friday: the next fire after it is Monday the 6th
    assert weekdays.next_after(at(2024, 5, 3, 9, 0)) == at(2024, 5, 6, 9, 0)


def test_rollovers_day_month_year_and_leap_day():
    s = slots_of(hourly(37))
    assert s.next_after(at(2024, 12, 31, 23, 40)) == at(2025, 1, 1, 0, 37), "year"
    assert s.next_after(at(2024, 4, 30, 23, 38)) == at(2024, 5, 1, 0, 37), "month"
    assert s.latest_at_or_before(at(2025, 1, 1, 0, 36)) == at(2024, 12, 31, 23, 37), "back across the year"
    assert s.next_after(at(2024, 2, 28, 23, 50)) == at(2024, 2, 29, 0, 37), "leap day"
    assert s.next_after(at(2023, 2, 28, 23, 50)) == at(2023, 3, 1, 0, 37), "no leap day"
    monthly = slots_of(ScheduleEntry.cron("0 0 31 * *", "e", "t", "fetch"))
    assert monthly.next_after(at(2024, 4, 1)) == at(2024, 5, 31), "months without a 31st are passed over"
    leap = slots_of(ScheduleEntry.cron("0 12 29 2 *", "e", "t", "fetch"))
    assert leap.next_after(at(2024, 3, 1)) == at(2028, 2, 29, 12), "four years on"


def test_timezone_shifts_local_hours():
    s = slots_of(hourly(30, {6}, tz="America/New_York"))
    assert s.next_after(at(2024, 7, 1)) == at(2024, 7, 1, 10, 30), "EDT is UTC-4"
    assert s.next_after(at(2024, 1, 1)) == at(2024, 1, 1, 11, 30), "EST is UTC-5"


def test_default_zone_comes_from_settings():
    assert slots_of(hourly(30, {6}), zone="Asia/Tokyo").next_after(at(2024, 7, 1)) == at(2024, 7, 1, 21, 30)


# Europe/Berlin: 2024-03-31 02:00 CET -> 03:00 CEST (01:00Z); 2024-10-27 03:00 CEST -> 02:00 CET (01:00Z).


def test_dst_spring_forward_every_hour_fires_once_per_real_hour():
    s = slots_of(hourly(30, tz="Europe/Berlin"))
    fires = s.between(at(2024, 3, 30, 22), at(2024, 3, 31, 4))
    assert fires == [at(2024, 3, 30, 22, 30), at(2024, 3, 30, 23, 30), at(2024, 3, 31, 0, 30), at(2024, 3, 31, 1, 30),
                     at(2024, 3, 31, 2, 30), at(2024, 3, 31, 3, 30)]


def test_dst_spring_forward_a_skipped_local_time_fires_once_just_after_the_gap():
    s = slots_of(hourly(30, {2}, tz="Europe/Berlin"))
    fires = s.between(at(2024, 3, 29), at(2024, 4, 2))
    # 02:30 local does not exist on the 31st: it fires at 03:00 CEST, once; other days 02:30
    assert fires == [at(2024, 3, 29, 1, 30), at(2024, 3, 30, 1, 30), at(2024, 3, 31, 1, 0), at(2024, 4, 1, 0, 30)]
    assert s.latest_at_or_before(at(2024, 3, 31, 1, 0)) == at(2024, 3, 31, 1, 0), "forward and backward agree"
    assert s.latest_at_or_before(at(2024, 3, 31, 12)) == at(2024, 3, 31, 1, 0)


def test_dst_fall_back_a_repeated_local_time_fires_once():
    s = slots_of(hourly(30, {2}, tz="Europe/Berlin"))
    fires = s.between(at(2024, 10, 26), at(2024, 10, 29))
    assert fires == [at(2024, 10, 26, 0, 30), at(2024, 10, 27, 0, 30), at(2024, 10, 28, 1, 30)]
    assert s.latest_at_or_before(at(2024, 10, 27, 1, 45)) == at(2024, 10, 27, 0, 30), "not again in the repeated hour"


def test_dst_fall_back_every_hour_fires_in_both_passes_of_the_repeated_hour():
    s = slots_of(hourly(30, tz="Europe/Berlin"))
    fires = s.between(at(2024, 10, 26, 23), at(2024, 10, 27, 3))
    assert fires == [at(2024, 10, 26, 23, 30), at(2024, 10, 27, 0, 30), at(2024, 10, 27, 1, 30), at(2024, 10, 27, 2, 30)]


def test_cron_form_in_a_zone_across_dst():
    s = slots_of(ScheduleEntry.cron("0 */6 * * *", "e", "t", "fetch", timezone="Europe/Berlin"))
    fires = s.between(at(2024, 3, 30, 20), at(2024, 3, 31, 20))
    # local 00:00 (CET, 23:00Z), 06:00/12:00/18:00 CEST (04:00Z/10:00Z/16:00Z)
    assert fires == [at(2024, 3, 30, 23), at(2024, 3, 31, 4), at(2024, 3, 31, 10), at(2024, 3, 31, 16)]


def test_decide_on_time_and_already_handled():
    s = slots_of(hourly(37))
    slot = at(2024, 5, 1, 12, 37)
    assert decide(s, slot + timedelta(seconds=5), None, grace_seconds=60, catch_up="skip") == Fire(slot, "slot")
    assert decide(s, slot + timedelta(seconds=5), slot, grace_seconds=60, catch_up="skip") is None
    assert decide(s, slot - timedelta(seconds=1), slot - timedelta(hours=1), grace_seconds=60, catch_up="skip") is None


def test_decide_after_an_outage_never_bursts():
    s = slots_of(hourly(37))
    last = at(2024, 5, 1, 8, 37)
    now = at(2024, 5, 1, 12, 50)  # 09:37 .. 12:37 missed; 12:37 is 13 minutes late
    assert decide(s, now, last, grace_seconds=60, catch_up="latest") == Fire(at(2024, 5, 1, 12, 37), "catch_up")
    assert decide(s, now, last, grace_seconds=60, catch_up="skip") == Fire(at(2024, 5, 1, 12, 37), "skip")
    assert decide(s, now, None, grace_seconds=60, catch_up="latest").kind == "skip", "no history: never down, nothing to catch up"
    back_in_time = at(2024, 5, 1, 12, 37, 30)  # restarted within the grace of the 12:37 slot
    assert decide(s, back_in_time, last, grace_seconds=60, catch_up="skip") == Fire(at(2024, 5, 1, 12, 37), "slot")


def test_reason_names_entry_and_slot():
    assert reason("fetch", Fire(at(2024, 5, 1, 6, 37), "slot")) == "schedule fetch@2024-05-01T06:37:00Z"
    assert reason("fetch", Fire(at(2024, 5, 1, 6, 37), "catch_up")).endswith("(catch-up)")
    assert reason("fetch", Fire(at(2024, 5, 1, 6, 37, 12), "boot")) == "schedule fetch@2024-05-01T06:37:12Z (boot)"


def test_naive_instants_are_refused():
    with pytest.raises(ValueError, match="aware"):
        slots_of(hourly(1)).next_after(datetime(2024, 1, 1))
