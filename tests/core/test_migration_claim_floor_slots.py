"""Migration 0057 (a floor slot per tenant) over 0052's single setting: claims keep floors either way, and its down restores 0052's schema exactly."""

from __future__ import annotations

import psycopg
from migration_chain import just_before

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.jobstore import Claimant
from queue_workflows.ops.schema_dump import schema_of

SLOTS = 57
WORKER = Claimant("w-slots", 21)


def _claims_keep_a_floor(url: str) -> list[int]:
    """Two claims on one session: the ids claimed, after checking the first left a floor behind."""
    claimed = []
    with psycopg.connect(url) as conn:
        node_queue.enqueue_ingest_jobs(({"task_name": "t", "queue": "fetch"} for _ in range(2)), conn=conn)
        conn.commit()
        for _ in range(2):
            claimed.append(node_queue.claim_ingest_job("fetch", WORKER, conn=conn)["id"])  # type: ignore[index]
            conn.commit()
            assert conn.execute("SELECT count(*) FROM qw_claim_floors('ingest_jobs', 'fetch', 'default')").fetchone()[0] == 1  # type: ignore[index]
    return claimed


def test_floor_slots_migrate_up_and_down_and_claims_keep_floors_on_both(scratch_database_url):
    url = scratch_database_url
    register_ingest_task("t", lambda reason, args: args)
    just_before(SLOTS, url)
    before = schema_of(url)
    assert "qw_claim_floor_slot" not in before
    first = _claims_keep_a_floor(url)
    assert db.bootstrap(url=url) == [v for v in (m.version for m in db.discover()) if v >= SLOTS]
    assert "qw_claim_floor_slot" in schema_of(url)
    second = _claims_keep_a_floor(url)
    db.downgrade(SLOTS - 1, url=url)
    assert schema_of(url) == before
    third = _claims_keep_a_floor(url)
    assert first + second + third == sorted(first + second + third)  # each claim took the oldest job
