"""An enqueue NOTIFYs only while a worker waits for it (migration 0051), and no wake-up is lost for it."""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest
from procs import Procs, query, service_env, wait_until, wait_workers_ready

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.worker.claim import ready_channel
from queue_workflows.worker.idle_baton import BATON_NAMESPACE

TAKE = "SELECT qw_take_idle_baton(%s, %s, %s) AS taken"


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("noop", lambda reason: {})


def heard(conn: psycopg.Connection, timeout: float = 0.3) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=timeout)]


@pytest.fixture
def listener(database_url):
    with db.connect(autocommit=True, url=database_url) as conn:
        conn.execute(f"LISTEN {ready_channel('fetch')}")
        conn.execute("LISTEN ingest_job_ready")
        yield conn


def test_an_enqueue_notifies_only_while_a_worker_holds_or_queues_for_the_baton(database_url, listener):
    node_queue.enqueue_ingest_job("noop", "fetch")
    assert heard(listener) == [], "nobody waits on 'fetch', yet the enqueue paid for a NOTIFY"
    with db.connect(autocommit=True, url=database_url) as idle_worker:
        assert idle_worker.execute(TAKE, (BATON_NAMESPACE, "fetch", 1000)).fetchone()["taken"]
        node_queue.enqueue_ingest_job("noop", "fetch")
        assert sorted(heard(listener)) == [("ingest_job_ready", "fetch"), (ready_channel("fetch"), "fetch")]
        node_queue.enqueue_ingest_job("noop", "load")
        assert heard(listener) == [], "a worker waiting on 'fetch' must not make 'load' notify"


def test_a_queue_whose_idle_workers_all_listen_is_announced_on_every_enqueue(database_url, conn):
    with db.connect(autocommit=True, url=database_url) as gpu_listener:
        gpu_listener.execute(f"LISTEN {ready_channel('gpu')}")
        node_queue.enqueue_node_job("n", "gpu", node_module="qw_test_nodes", required_model="m")
        assert heard(gpu_listener) == [(ready_channel("gpu"), "gpu")], "gpu workers do not use the baton: every job must be announced"
    conn.execute("INSERT INTO qw_wake_every_enqueue (queue) VALUES ('load')")  # what a QW_IDLE_BATON=0 worker does at start
    with db.connect(autocommit=True, url=database_url) as load_listener:
        load_listener.execute(f"LISTEN {ready_channel('load')}")
        node_queue.enqueue_ingest_job("noop", "load")
        assert heard(load_listener) == [(ready_channel("load"), "load")]


def test_a_worker_takes_the_baton_only_after_the_producers_that_did_not_notify_commit(database_url):
    """The handshake: a producer that found nobody waiting keeps the shared lock until its commit."""
    with db.connect(url=database_url) as producer, db.connect(autocommit=True, url=database_url) as worker:
        node_queue.enqueue_ingest_job("noop", "fetch", conn=producer)  # transaction left open
        assert not worker.execute(TAKE, (BATON_NAMESPACE, "fetch", 200)).fetchone()["taken"], \
            "the worker went to listen while a job it cannot see yet was announced to nobody"
        producer.commit()
        assert worker.execute(TAKE, (BATON_NAMESPACE, "fetch", 1000)).fetchone()["taken"]
        seen = worker.execute("SELECT count(*) AS n FROM ingest_jobs WHERE queue = 'fetch' AND status = 'queued'").fetchone()["n"]
        assert seen == 1, "after taking the baton the worker's catch-up claim sees the producer's job"


POLL_SECONDS = 10.0  # the safety poll: a lost wake-up would wait for it
WAKE_BOUND = 2.0  # well below the poll, well above a NOTIFY on a loaded 2-core machine
ROUNDS = 25


@pytest.mark.parametrize("n_workers", [1, 2])
def test_no_wake_up_is_lost_while_producers_race_workers_going_idle(database_url, procs: Procs, n_workers: int):
    """Each round wakes a worker with one job, then two producers enqueue at random moments as it
    finishes and goes idle, in transactions left open a random while (a host's own writes), and
    then nothing more is enqueued: every job must start within the NOTIFY path, never the poll."""
    env = service_env(database_url, QW_POLL_SECONDS=str(POLL_SECONDS), QW_LOG_LEVEL="WARNING")
    workers = [procs.worker(env, "fetch") for _ in range(n_workers)]
    wait_workers_ready(database_url, workers)
    wait_until(lambda: query(database_url, "SELECT count(*) AS n FROM pg_locks WHERE database = (SELECT oid FROM pg_database"
                             " WHERE datname = current_database()) AND locktype = 'advisory' AND classid = %s AND granted",
                             (BATON_NAMESPACE,))[0]["n"] == 1, timeout=20, what="an idle worker holding the baton")
    rng = random.Random(25)
    errors: list[BaseException] = []

    def produce(conn: psycopg.Connection, delay: float, hold: float) -> None:
        try:
            time.sleep(delay)  # lands anywhere in the worker's complete -> empty claim -> baton -> catch-up -> listen
            node_queue.enqueue_ingest_job("noop", "fetch", reason="race", conn=conn)
            time.sleep(hold)
            conn.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    unstarted = "SELECT count(*) AS n FROM ingest_jobs WHERE started_at IS NULL"
    with db.connect(url=database_url) as first, db.connect(url=database_url) as p1, db.connect(url=database_url) as p2:
        for _ in range(ROUNDS):
            node_queue.enqueue_ingest_job("noop", "fetch", reason="wake", conn=first)
            first.commit()
            threads = [threading.Thread(target=produce, args=(c, rng.uniform(0.0, 0.04), rng.choice([0.0, rng.uniform(0.0, 0.05)])))
                       for c in (p1, p2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert not errors, errors
            wait_until(lambda: query(database_url, unstarted)[0]["n"] == 0, timeout=WAKE_BOUND, interval=0.01,
                       what="every job of the round to start without the safety poll")
    rows = query(database_url, "SELECT extract(epoch FROM started_at - created_at)::float8 AS wait FROM ingest_jobs ORDER BY wait DESC")
    assert len(rows) == 3 * ROUNDS
    print(f"\n{len(rows)} jobs; slowest start {rows[0]['wait']:.3f}s after its enqueue began")


def test_migration_0051_goes_down_and_up_on_a_populated_database(database_url, conn):
    """Down restores the notify-on-every-enqueue trigger, up the quiet one; no job row is touched."""
    for i in range(200):
        node_queue.enqueue_ingest_job("noop", "fetch", {"i": i})
    conn.execute("UPDATE ingest_jobs SET status = 'completed', finished_at = now() WHERE id % 3 = 0")
    before = conn.execute("SELECT md5(string_agg(id || status, ',' ORDER BY id)) AS h FROM ingest_jobs").fetchone()["h"]
    previous = max(m.version for m in db.discover() if m.version < 51)
    with db.connect(autocommit=True, url=database_url) as listener:
        listener.execute(f"LISTEN {ready_channel('fetch')}")
        db.downgrade(previous, url=database_url)
        assert conn.execute("SELECT to_regclass('qw_wake_every_enqueue') AS t").fetchone()["t"] is None
        # The schema as of 0050, so a plain INSERT: today's enqueue names columns of later migrations (0054's trace_context).
        with db.connect(autocommit=True, url=database_url) as producer:
            producer.execute("INSERT INTO ingest_jobs (task_name, queue) VALUES ('noop', 'fetch')")
        assert heard(listener) == [(ready_channel("fetch"), "fetch")], "down must restore a NOTIFY on every enqueue"
        assert 51 in db.bootstrap(url=database_url)
        node_queue.enqueue_ingest_job("noop", "fetch")
        assert heard(listener) == [], "up again: nobody waits, nothing is sent"
    after = conn.execute("SELECT md5(string_agg(id || status, ',' ORDER BY id)) AS h FROM ingest_jobs WHERE id <= 200").fetchone()["h"]
    assert after == before
    assert conn.execute("SELECT queue FROM qw_wake_every_enqueue").fetchall() == [{"queue": "gpu"}]

