"""Slot math, pure: when an entry fires, and what a scheduler should do at a given instant.

A *slot* is one instant an entry fires at, as an aware UTC datetime. Slots are a pure
function of the entry's cron expression (minute/hours entries become one) and its time
zone, so every replica computes the same slot times whatever its own clock says; that is
what lets the `(entry_name, slot_time)` row settle which replica enqueues a slot.

Time zones follow Debian cron, as `cronsim` implements it: an entry at a fixed local time
(`"30 2 * * *"`) fires once a day, at the first valid minute after a local time that
daylight saving skips (02:30 -> 03:00 on a spring-forward day) and at the first of the two
occurrences of a repeated one; an entry that fires every hour (`"30 * * * *"`) fires once
per real hour, right through both transitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim

from queue_workflows.settings import iana_zone

UTC = UTC

FireKind = Literal["slot", "catch_up", "boot", "skip"]
"""slot: on time; catch_up: the latest missed slot, run late; boot: the start-up kick;
skip: a missed slot the policy drops (decided, logged, never written)."""


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"slot math needs an aware datetime, not naive {t.isoformat()}")
    return t.astimezone(UTC)


@dataclass(frozen=True)
class Slots:
    """The slots of one cron expression in one time zone."""

    expression: str
    zone: ZoneInfo

    @classmethod
    def of(cls, expression: str, zone_name: str) -> Slots:
        return cls(expression, iana_zone(zone_name))

    def next_after(self, t: datetime) -> datetime:
        """The first slot strictly after `t`."""
        return _utc(next(CronSim(self.expression, _utc(t).astimezone(self.zone))))

    def latest_at_or_before(self, t: datetime) -> datetime:
        """The last slot at or before `t` (`t` itself when `t` is a slot)."""
        # cronsim steps back one second before searching: start one second past `t`,
        # truncated, so a slot exactly at `t` (or earlier in its second) is found.
        start = _utc(t).replace(microsecond=0) + timedelta(seconds=1)
        return _utc(next(CronSim(self.expression, start.astimezone(self.zone), reverse=True)))

    def between(self, after: datetime, until: datetime, limit: int = 10_000) -> list[datetime]:
        """Slots in (`after`, `until`], at most `limit` of them (for tests and listings)."""
        found: list[datetime] = []
        slot = self.next_after(after)
        while slot <= until and len(found) < limit:
            found.append(slot)
            slot = self.next_after(slot)
        return found


@dataclass(frozen=True)
class Fire:
    slot: datetime
    kind: FireKind


def decide(slots: Slots, now: datetime, last: datetime | None, *, grace_seconds: float, catch_up: str) -> Fire | None:
    """What to do at `now`, the last slot handled being `last` (None: this entry has no history).

    Only the latest slot at or before `now` is ever considered, so however long the outage,
    the answer is one slot or none, never a burst. It is on time within `grace_seconds`;
    older, it was missed: `catch_up="latest"` runs it late, `"skip"` (and an entry with no
    history, which was never "down") drops it.
    """
    slot = slots.latest_at_or_before(now)
    if last is not None and slot <= last:
        return None
    if (now - slot).total_seconds() <= grace_seconds:
        return Fire(slot, "slot")
    if catch_up == "latest" and last is not None:
        return Fire(slot, "catch_up")
    return Fire(slot, "skip")


def stamp(t: datetime) -> str:
    """`2024-05-01T06:37:00Z`: how slots appear in reasons and logs."""
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def reason(entry_name: str, fire: Fire) -> str:
    """The job's `reason`, naming the entry and the slot: `schedule fetch@2024-05-01T06:37:00Z`."""
    suffix = {"slot": "", "catch_up": " (catch-up)", "boot": " (boot)"}.get(fire.kind, f" ({fire.kind})")
    return f"schedule {entry_name}@{stamp(fire.slot)}{suffix}"
