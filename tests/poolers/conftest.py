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
        # A session pool gives each client a server connection for good: room for a worker's and an orchestrator's.
        bouncer = PgBouncer(database_url, pool_mode, pool_size=30 if pool_mode == "session" else 4)
        started.append(bouncer)
        bouncer.start()
        return bouncer

    yield start
    for bouncer in started:
        bouncer.close()
