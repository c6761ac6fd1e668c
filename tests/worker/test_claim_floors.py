"""Claims under a pinned horizon (migration 0052): a session's claim starts each band at its floor, and a floor never hides a job for long."""

from __future__ import annotations

import time

import psycopg
import pytest

from queue_workflows import db, jobstore, node_queue, register_ingest_task
from queue_workflows.jobstore import Claimant

WORKER = Claimant("w-floor", 11)
DEAD = 400  # claimed versions a pinned snapshot keeps in the claim index


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason, args: args)


def _enqueue(n: int) -> list[int]:
    return [row["id"] for row in node_queue.enqueue_ingest_jobs({"task_name": "t", "queue": "fetch"} for _ in range(n))]


def _claim(conn: psycopg.Connection) -> int | None:
    job = node_queue.claim_ingest_job("fetch", WORKER, conn=conn)
    conn.commit()
    return None if job is None else int(job["id"])


_ENTRIES_READ = "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index WHERE indrelid = 'ingest_jobs'::regclass"


def _index_entries_read(conn: psycopg.Connection) -> int:
    """Index entries one claim reads on this session, dead ones included (rolled back). The counters
    hold whatever the backend has not reported yet, so the claim's own share is a difference."""
    before = conn.execute(_ENTRIES_READ).fetchone()[0]  # type: ignore[index]
    node_queue.claim_ingest_job("fetch", WORKER, conn=conn)
    after = conn.execute(_ENTRIES_READ).fetchone()[0]  # type: ignore[index]
    conn.rollback()
    return int(after) - int(before or 0)


def test_a_claim_under_a_pinned_horizon_jumps_the_versions_claimed_before_it(database_url):
    ids = _enqueue(DEAD + 50)
    with psycopg.connect(database_url) as pin, psycopg.connect(database_url) as conn:
        pin.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM ingest_jobs")  # the snapshot: no version from here on can be removed
        with psycopg.connect(database_url, autocommit=True) as other:  # what another worker claimed and finished meanwhile
            peer = Claimant("w-peer", 12)
            for _ in range(DEAD):
                job = node_queue.claim_ingest_job("fetch", peer, conn=other)
                node_queue.mark_ingest_completed(job["id"], {}, worker_id=peer.worker_id, conn=other)  # type: ignore[index]
        assert _claim(conn) == ids[DEAD]  # the session's first claim walks them once
        read = _index_entries_read(conn)
        pin.rollback()
    # Each of the claim's probes of the band (its head, then the row to lock) would walk them all.
    assert read < 20, f"the claim read {read} index entries behind {DEAD} dead versions: it walks them"


def test_a_job_requeued_below_the_floor_is_claimed_next(database_url):
    first, second, third = _enqueue(3)
    with psycopg.connect(database_url) as conn:
        assert [_claim(conn), _claim(conn)] == [first, second]
        assert jobstore.release(None, "ingest_jobs", [first], WORKER.worker_id) == {first}
        assert _claim(conn) == first, "a released job waited behind a newer one: the requeue did not drop the floor"
        assert _claim(conn) == third


def test_a_job_left_below_the_floor_is_claimed_when_nothing_is_above_it(database_url):
    first, second, third = _enqueue(3)
    with psycopg.connect(database_url) as conn, psycopg.connect(database_url) as racer:
        assert _claim(conn) == first
        assert node_queue.claim_ingest_job("fetch", Claimant("w-racer", 12), conn=racer)["id"] == second  # type: ignore[index]
        assert _claim(conn) == third  # passes the racer's row, locked
        racer.rollback()  # and the racer's claim never happened: no requeue, nothing moves the floor
        assert _claim(conn) == second


def test_a_job_left_below_the_floor_is_claimed_within_seconds_when_the_band_has_more(database_url):
    first, second, *rest = _enqueue(40)
    started = time.monotonic()
    with psycopg.connect(database_url) as conn, psycopg.connect(database_url) as racer:
        assert _claim(conn) == first
        assert node_queue.claim_ingest_job("fetch", Claimant("w-racer", 12), conn=racer)["id"] == second  # type: ignore[index]
        assert _claim(conn) == rest[0]
        racer.rollback()
        claimed = []
        while second not in claimed and time.monotonic() - started < 10:
            claimed.append(_claim(conn))
            time.sleep(0.25)
    assert second in claimed, f"the rolled-back job was not claimed within 10 s: {claimed}"
    assert len(claimed) > 1  # it did wait behind newer jobs a while: the floor's lifetime bounds that wait


def test_a_queue_with_flow_limits_keeps_no_floor(database_url):
    _enqueue(2)
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO flow_limits (queue, task, max_running) VALUES ('fetch', '*', 5)")
        conn.commit()
        assert _claim(conn) is not None
        assert conn.execute("SELECT count(*) FROM qw_claim_floors('ingest_jobs', 'fetch', 'default')").fetchone()[0] == 0  # type: ignore[index]
        conn.execute("DELETE FROM flow_limits")
        conn.commit()
        assert _claim(conn) is not None
        assert conn.execute("SELECT count(*) FROM qw_claim_floors('ingest_jobs', 'fetch', 'default')").fetchone()[0] == 1  # type: ignore[index]


def test_status_changes_that_touch_no_index_stay_hot(database_url):
    """A job's usage is written while it runs; the fillfactor leaves room on its page for that update to stay HOT."""
    with db.connect(url=database_url) as conn:
        conn.execute("INSERT INTO ingest_jobs (task_name, queue, status, claimed_by, started_at) "
                     "SELECT 't', 'fetch', 'running', 'w', now() FROM generate_series(1, 400)")
        conn.commit()
        firsts = [r["id"] for r in conn.execute("SELECT min(id) AS id FROM ingest_jobs GROUP BY (ctid::text::point)[0] ORDER BY 1 LIMIT 8")]
        for job_id in firsts:
            conn.execute("UPDATE ingest_jobs SET cpu_seconds = 1.5, wall_seconds = 2 WHERE id = %s", (job_id,))
        hot = conn.execute("SELECT pg_stat_get_xact_tuples_hot_updated('ingest_jobs'::regclass) AS n").fetchone()["n"]  # type: ignore[index]
        conn.rollback()
    assert hot == len(firsts), f"{len(firsts) - hot} of {len(firsts)} usage updates were not HOT: the page had no room"


def test_the_claim_index_scan_starts_at_the_floor(database_url):
    """Rejecting the dead entries in the index, without their heap rows, is still a walk: 20,000 of them fill ~60 index pages."""
    ids = _enqueue(20_050)
    with psycopg.connect(database_url) as pin, psycopg.connect(database_url) as conn:
        pin.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM ingest_jobs")
        with psycopg.connect(database_url, autocommit=True) as other:
            other.execute("UPDATE ingest_jobs SET status = 'completed', finished_at = now() WHERE id < %s", (ids[20_000],))
        assert _claim(conn) == ids[20_000]
        statement, params = node_queue.claim_statement("ingest_jobs", "fetch", WORKER)
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement.as_string(conn)}", params).fetchone()[0]  # type: ignore[index]
        conn.rollback()
        pin.rollback()
    top = plan[0]["Plan"]
    buffers = int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])
    assert buffers < 100, f"the claim touched {buffers} buffers behind 20,000 dead entries: its scans start before the floor"


def _enqueue_for(tenants: list[str]) -> dict[str, int]:
    rows = node_queue.enqueue_ingest_jobs({"task_name": "t", "queue": "fetch", "tenant": t} for t in tenants)
    return {t: int(row["id"]) for t, row in zip(tenants, rows)}


# Every setting a session may keep floors in: the 256 slots, and 0052's single one.
_LONGEST_FLOORS = ("SELECT max(length(current_setting(n, true))) FROM "
                   "(SELECT 'qw.claim_floor_' || i AS n FROM generate_series(0, 255) AS i UNION ALL SELECT 'qw.claim_floors') AS s")


def test_a_claim_reads_only_its_own_tenants_floors(database_url):
    """With floors for every tenant in one setting, a claim parsed and a note rewrote them all: at
    100 tenants the fair claim ran at 0.6x a one-tenant queue (migration 0057)."""
    tenants = [f"t{i}" for i in range(100)]
    _enqueue_for(tenants + tenants)
    with psycopg.connect(database_url) as conn:
        for _ in tenants:
            assert _claim(conn) is not None
        biggest = conn.execute(_LONGEST_FLOORS).fetchone()[0]  # type: ignore[index]
        floors = conn.execute("SELECT count(*) FROM qw_claim_floors('ingest_jobs', 'fetch', 't7')").fetchone()[0]  # type: ignore[index]
    assert biggest < 200, f"a floor setting holds {biggest} characters after claims of 100 tenants: it keeps other tenants' floors"
    assert floors == 1  # and the tenant's own floor is kept


def _colliding_tenants(conn: psycopg.Connection) -> tuple[str, str]:
    row = conn.execute(
        "SELECT a.t, b.t FROM (SELECT 'a' || i AS t FROM generate_series(1, 600) AS i) AS a "
        "JOIN (SELECT 'b' || i AS t FROM generate_series(1, 600) AS i) AS b "
        "  ON qw_claim_floor_slot('ingest_jobs', 'fetch', a.t) = qw_claim_floor_slot('ingest_jobs', 'fetch', b.t) LIMIT 1"
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_tenants_sharing_a_floor_slot_never_read_each_others_floors(database_url):
    with psycopg.connect(database_url) as conn:
        a, b = _colliding_tenants(conn)
        conn.rollback()
        first = _enqueue_for([a, b])
        _enqueue_for([a, b])
        conn.execute("UPDATE tenant_shares SET active = false WHERE tenant = %s", (b,))  # the claims take a's jobs first
        conn.commit()
        assert _claim(conn) == first[a]
        assert conn.execute("SELECT count(*) FROM qw_claim_floors('ingest_jobs', 'fetch', %s)", (b,)).fetchone()[0] == 0  # type: ignore[index]
        conn.execute("UPDATE tenant_shares SET active = (tenant = %s)", (b,))
        conn.commit()
        assert _claim(conn) == first[b]  # b's band is probed whole, not from a's floor
        floors = conn.execute("SELECT tenant, count(k.*) FROM (VALUES (%s), (%s)) AS v (tenant) "
                              "LEFT JOIN LATERAL qw_claim_floors('ingest_jobs', 'fetch', v.tenant) AS k ON true GROUP BY tenant",
                              (a, b)).fetchall()
    assert dict(floors) == {a: 0, b: 1}  # b took the slot over: a's floor is gone, never read as b's
