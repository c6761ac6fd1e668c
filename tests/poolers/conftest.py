"""PgBouncer fixtures: the real binary in front of the test's own database, or a skip saying why not."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pgbouncer import PGBOUNCER, SKIP_REASON, PgBouncer


@pytest.fixture
def pgbouncer(database_url: str) -> Iterator[Callable[[str], PgBouncer]]:
    """Start a PgBouncer in the pool mode asked for, in front of this test's database; stopped at teardown."""
    if PGBOUNCER is None:
        pytest.skip(SKIP_REASON)
    started: list[PgBouncer] = []

    def start(pool_mode: str) -> PgBouncer:
        bouncer = PgBouncer(database_url, pool_mode)
        started.append(bouncer)
        bouncer.start()
        return bouncer

    yield start
    for bouncer in started:
        bouncer.close()
