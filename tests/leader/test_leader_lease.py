"""The leader's lease on a virtual server clock: who may bid, renew and act, at the boundary.

Real Postgres, real connections; only the time the lease queries judge by is injected
(`Elector(clock=...)`), so a lapse takes no waiting. Real processes: test_invariant_leader_exclusivity.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from procs import wait_until
from psycopg import errors

from queue_workflows import db
from queue_workflows.errors import ConfigError
from queue_workflows.leader.leadership import Elector, LeadershipLost, Term
from queue_workflows.ops import admin
from queue_workflows.settings import load_settings

LEASE = 5.0
START = datetime(2030, 1, 1, tzinfo=UTC)


class Clocks:
    """The virtual server time (`at`) and a virtual monotonic clock (`now`), in seconds from START."""

    def __init__(self) -> None:
        self.at = 0.0
        self.now = 0.0

    def server(self) -> datetime:
        return START + timedelta(seconds=self.at)

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def elector(database_url: str, clocks: Clocks) -> Iterator:
    made: list[Elector] = []

    def make(name: str) -> Elector:
        made.append(Elector(orchestrator_id=name, lease_seconds=LEASE, renew_seconds=1.0, clock=clocks.server, now_fn=clocks.monotonic))
        return made[-1]

    yield make
    for e in made:
        e.resign()


def bid(e: Elector) -> Term | None:
    return e.bid(e._connection())


def guard(term: Term, url: str) -> None:
    with db.connect(url=url) as conn:
        term.guard(conn)


def test_a_live_lease_holds_off_every_bid_until_the_server_clock_reaches_its_end(database_url, elector, clocks) -> None:
    a, b = elector("a"), elector("b")
    term = bid(a)
    assert term is not None and bid(a) is None  # the holder itself cannot start a second term
    clocks.at = LEASE - 0.001
    assert bid(b) is None
    guard(term, database_url)
    clocks.at = LEASE
    taken = bid(b)
    assert taken is not None and taken.epoch == term.epoch + 1
    with pytest.raises(LeadershipLost, match="superseded"):
        guard(term, database_url)
    assert term.ended.is_set() and not a.renew(term)


def test_renewal_moves_the_end_of_the_lease_from_the_renewal(database_url, elector, clocks) -> None:
    a, b = elector("a"), elector("b")
    term = bid(a)
    assert term is not None
    clocks.at = clocks.now = 4.0
    assert a.renew(term) and term.valid_until == 4.0 + LEASE
    clocks.at = 4.0 + LEASE - 0.001
    assert bid(b) is None
    guard(term, database_url)
    clocks.at = 4.0 + LEASE
    assert bid(b) is not None


def test_a_lapsed_lease_cannot_be_renewed_even_with_no_successor(database_url, elector, clocks) -> None:
    a = elector("a")
    term = bid(a)
    assert term is not None
    clocks.at = LEASE
    assert not a.renew(term) and term.ended.is_set()
    again = bid(a)
    assert again is not None and again.epoch == term.epoch + 1


def test_a_leader_whose_own_clock_passed_the_lease_refuses_work_before_asking_the_server(database_url, elector, clocks) -> None:
    a = elector("a")
    term = bid(a)
    assert term is not None
    clocks.now = LEASE  # frozen past its lease on its own clock; the server's still says valid
    with db.connect(url=database_url) as conn:
        conn.close()  # asking the server would fail differently
        with pytest.raises(LeadershipLost, match="lapsed"):
            term.guard(conn)
    assert term.ended.is_set() and not a.renew(term)


def test_a_released_lease_or_a_gone_lease_connection_is_taken_at_once(database_url, elector, clocks) -> None:
    a, b, c = elector("a"), elector("b"), elector("c")
    first = bid(a)
    assert first is not None
    a.resign()
    second = bid(b)
    assert second is not None and second.epoch == first.epoch + 1
    b._drop()  # the leader died: its lease connection is gone although the lease runs on
    # The server ends the closed session's backend a moment after the client hangs up; the virtual
    # clock stands still meanwhile, so the lease never lapses: what frees it is the gone connection.
    third = wait_until(lambda: bid(c), timeout=10, what="c to take the lease of a leader whose connection is gone")
    assert third.epoch == second.epoch + 1


def test_status_shows_a_lapsed_leader_until_another_takes_over(database_url, elector, clocks) -> None:
    a, b = elector("a"), elector("b")
    term = bid(a)
    assert term is not None
    a._beat(a._connection(), "leader", term.epoch, force=True)
    b._beat(b._connection(), "standby", None, force=True)
    roles = lambda: {o["orchestrator_id"]: o["role"] for o in admin.orchestrator_list()}  # noqa: E731 - on the real clock
    assert roles() == {"a": "leader", "b": "standby"}
    with db.connect(autocommit=True, url=database_url) as conn:
        conn.execute("UPDATE qw_leadership SET lease_until = clock_timestamp() - interval '1 second'")
    assert roles() == {"a": "lapsed", "b": "standby"}
    taken = bid(b)
    assert taken is not None
    b._beat(b._connection(), "leader", taken.epoch, force=True)
    assert roles() == {"a": "deposed", "b": "leader"}


def test_the_worker_role_reads_leadership_but_cannot_take_it(worker_url) -> None:  # noqa: F811
    with psycopg.connect(worker_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM qw_leadership").fetchone() == (1,)
        for statement in ("UPDATE qw_leadership SET epoch = epoch + 1", "DELETE FROM qw_leadership", "TRUNCATE qw_leadership"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)


def test_a_renewal_period_as_long_as_the_lease_is_refused() -> None:
    with pytest.raises(ConfigError, match="QW_LEADER_RENEW_SECONDS"):
        load_settings(leader_lease_seconds=2, leader_renew_seconds=2)
    assert load_settings(leader_lease_seconds=2).leader_renew_seconds is None


def test_renewal_never_waits_for_the_leaders_own_guarded_transactions(database_url, elector, clocks) -> None:
    a = elector("a")
    term = bid(a)
    assert term is not None
    a._connection().execute("SET lock_timeout = '1s'")
    with db.connect(url=database_url) as busy:  # a service of a, mid-transaction past its guard
        term.guard(busy)
        clocks.at = clocks.now = 1.0
        assert a.renew(term)
        busy.execute("SELECT 1")
