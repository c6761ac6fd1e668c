"""The three queues under test, behind one small interface, each in its own database.

Each system: create its database and schema, start N worker processes, say when they are
ready, enqueue (in bulk, in one transaction, or one job at a time), count what is left, and
read enqueue->start / enqueue->finish latencies from its own tables (database clock).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import common
import psycopg
from common import Procs

from queue_workflows import testing


class System:
    name = "?"
    config = ""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.url = ""

    def describe(self) -> str:
        return self.config

    def setup(self) -> None: ...
    def spawn_workers(self, procs: Procs, n: int) -> list: ...
    def ready_count(self) -> int: ...
    def enqueue_many(self, n: int) -> None: ...
    def unfinished(self) -> int: ...
    def succeeded(self) -> int: ...
    def reset(self) -> None: ...

    # one job at a time (latency)
    def open(self) -> None: ...
    def close(self) -> None: ...
    def enqueue_one(self) -> int: ...
    def is_done(self, job_id: int) -> bool: ...
    def latencies(self, ids: list[int]) -> list[tuple[float, float]]:
        """(start - enqueue, finish - enqueue) in seconds for each job, from database timestamps."""
        ...

    def teardown(self) -> None:
        if self.url:
            common.drop_database(self.server_url, self.url)

    def _rows(self, query: str, ids: list[int]) -> list[tuple[float, float]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return [(float(a), float(b)) for a, b in conn.execute(query, (ids,)).fetchall()]


class QueueWorkflows(System):
    name = "queue_workflows"
    config = "python -m qw_services.worker --queue=fetch (1 job at a time; LISTEN + greedy drain + 1 s poll)"

    def setup(self) -> None:
        self.url = common.qw_database(self.server_url)

    def spawn_workers(self, procs: Procs, n: int) -> list:
        env = common.qw_env(self.url)
        return [procs.qw_worker(env) for _ in range(n)]

    def ready_count(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM worker_heartbeats")

    def enqueue_many(self, n: int) -> None:
        from queue_workflows import db, node_queue

        with db.connect(url=self.url) as conn, conn.transaction():
            node_queue.enqueue_ingest_jobs(({"task_name": "noop", "queue": "fetch", "reason": "bench"} for _ in range(n)), conn=conn)

    def unfinished(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM ingest_jobs WHERE status IN ('queued', 'running')")

    def succeeded(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM ingest_jobs WHERE status = 'completed'")

    def reset(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("TRUNCATE ingest_jobs, worker_heartbeats RESTART IDENTITY")

    def open(self) -> None:
        from queue_workflows import db

        self.conn = db.connect(autocommit=True, url=self.url)
        self.xids: dict[int, str] = {}

    def close(self) -> None:
        self.conn.close()

    def enqueue_one(self) -> int:
        from queue_workflows import node_queue

        return int(node_queue.enqueue_ingest_job("noop", "fetch", reason="bench", conn=self.conn)["id"])

    def is_done(self, job_id: int) -> bool:
        row = self.conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job_id,)).fetchone()
        return row is not None and row["status"] in ("completed", "failed")

    def latencies(self, ids: list[int]) -> list[tuple[float, float]]:
        return self._rows(
            "SELECT extract(epoch FROM started_at - created_at), extract(epoch FROM finished_at - created_at) "
            "FROM ingest_jobs WHERE id = ANY(%s) AND status = 'completed'",
            ids,
        )

    def enqueue_one_noting_commit(self) -> int:
        """One job, its transaction's id noted so `from_commit` can read when it committed."""
        from queue_workflows import node_queue

        with self.conn.transaction():
            job_id = int(node_queue.enqueue_ingest_job("noop", "fetch", reason="bench", conn=self.conn)["id"])
            self.xids[job_id] = self.conn.execute("SELECT pg_current_xact_id()::text AS xid").fetchone()["xid"]
        return job_id

    def from_commit(self, ids: list[int]) -> list[tuple[float, float]]:
        """(start, finish) - the enqueue's COMMIT (track_commit_timestamp), for jobs enqueued noting it."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM j.started_at - c.at), extract(epoch FROM j.finished_at - c.at) "
                "FROM unnest(%s::bigint[], %s::text[]) AS n(id, xid) JOIN ingest_jobs j ON j.id = n.id "
                "CROSS JOIN LATERAL (SELECT pg_xact_commit_timestamp(n.xid::xid8::xid) AS at) AS c "
                "WHERE j.status = 'completed'",
                (ids, [self.xids[i] for i in ids]),
            ).fetchall()
        return [(float(a), float(b)) for a, b in rows]


class QueueWorkflowsBatch(QueueWorkflows):
    name = "queue_workflows_batch"
    batch = 100
    config = f"python -m qw_services.worker --queue=fetch --batch {batch} (batch mode: one claim and one completion statement per batch)"

    def spawn_workers(self, procs: Procs, n: int) -> list:
        env = common.qw_env(self.url)
        argv = [sys.executable, "-m", "qw_services.worker", "--queue=fetch", f"--batch={self.batch}"]
        return [procs.spawn("qw-batch-worker", argv, env) for _ in range(n)]


class QueueWorkflowsBatchTenants(QueueWorkflowsBatch):
    """Batch mode with fair share at work: the jobs spread round-robin over 100 tenants (docs/flow_control.md)."""

    name = "queue_workflows_batch_tenants"
    tenants = 100
    config = QueueWorkflowsBatch.config + f"; jobs of {tenants} tenants"

    def enqueue_many(self, n: int) -> None:
        from queue_workflows import bulk, db

        with db.connect(url=self.url) as conn, conn.transaction():
            bulk.copy_ingest_jobs(({"task_name": "noop", "queue": "fetch", "reason": "bench", "tenant": f"t{i % self.tenants}"}
                                   for i in range(n)), conn=conn)

    def reset(self) -> None:
        super().reset()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("TRUNCATE tenant_shares")


class Procrastinate(System):
    name = "procrastinate"
    config = "python -m procrastinate worker --concurrency=1 (sync no-op task; defaults otherwise)"

    def setup(self) -> None:
        self.url = testing.create_database(self.server_url, "qwbench_proc")
        from peer_apps import make_procrastinate_app

        self.app = make_procrastinate_app(self.url)

        async def _apply() -> None:
            async with self.app.open_async():
                await self.app.schema_manager.apply_schema_async()

        asyncio.run(_apply())

    def spawn_workers(self, procs: Procs, n: int) -> list:
        env = common.child_env(None, BENCH_PROCRASTINATE_URL=self.url)
        argv = [sys.executable, "-m", "procrastinate", "--app=peer_apps.procrastinate_app", "worker", "--queues=bench", "--concurrency=1"]
        return [procs.spawn("procrastinate-worker", argv, env) for _ in range(n)]

    def ready_count(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM procrastinate_workers")

    def enqueue_many(self, n: int) -> None:
        with self.app.open():
            self.app.tasks["noop"].batch_defer(*({} for _ in range(n)))

    def unfinished(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")

    def succeeded(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")

    def reset(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers CASCADE")

    def open(self) -> None:
        self.app.open()
        self.conn = psycopg.connect(self.url, autocommit=True)

    def close(self) -> None:
        self.conn.close()
        self.app.close()

    def enqueue_one(self) -> int:
        return int(self.app.tasks["noop"].defer())

    def is_done(self, job_id: int) -> bool:
        row = self.conn.execute("SELECT status FROM procrastinate_jobs WHERE id = %s", (job_id,)).fetchone()
        return row is not None and row[0] in ("succeeded", "failed")

    def latencies(self, ids: list[int]) -> list[tuple[float, float]]:
        return self._rows(
            "SELECT extract(epoch FROM s.at - d.at), extract(epoch FROM f.at - d.at) FROM procrastinate_events d "
            "JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started' "
            "JOIN procrastinate_events f ON f.job_id = d.job_id AND f.type = 'succeeded' "
            "WHERE d.type = 'deferred' AND d.job_id = ANY(%s)",
            ids,
        )


class PgQueuer(System):
    name = "pgqueuer"
    config = "pgqueuer.run(factory), as `pgq run` does (defaults: batch_size=10; async no-op)"

    def describe(self) -> str:
        from peer_apps import pgqueuer_driver_name

        return f"{self.config}, {pgqueuer_driver_name()} driver"

    def setup(self) -> None:
        self.url = testing.create_database(self.server_url, "qwbench_pgq")
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.queries import Queries

        async def _install() -> None:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                await Queries(PsycopgDriver(conn)).install()

        asyncio.run(_install())

    def spawn_workers(self, procs: Procs, n: int) -> list:
        env = common.child_env(None, BENCH_PGQUEUER_URL=self.url)
        argv = [sys.executable, "-c", "import peer_apps; peer_apps.run_pgqueuer_worker()"]
        return [procs.spawn("pgqueuer-worker", argv, env) for _ in range(n)]

    def ready_count(self) -> int:
        # pgqueuer keeps no worker registry: count the worker connections (one each), then settle.
        n = common.scalar(
            self.url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        if n:
            time.sleep(1.0)
        return n

    def _queries(self, conn: psycopg.Connection) -> Any:
        from pgqueuer.db import SyncPsycopgDriver
        from pgqueuer.queries import SyncQueries

        return SyncQueries(SyncPsycopgDriver(conn))

    def enqueue_many(self, n: int) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            self._queries(conn).enqueue(["noop"] * n, [None] * n, [0] * n)

    def unfinished(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM pgqueuer")

    def succeeded(self) -> int:
        return common.scalar(self.url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")

    def reset(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")

    def open(self) -> None:
        self.conn = psycopg.connect(self.url, autocommit=True)
        self.q = self._queries(self.conn)

    def close(self) -> None:
        self.conn.close()

    def enqueue_one(self) -> int:
        return int(self.q.enqueue("noop", None)[0])

    def is_done(self, job_id: int) -> bool:
        # Finished jobs leave the queue table when the worker's status buffer flushes (~0.1 s).
        return self.conn.execute("SELECT 1 FROM pgqueuer WHERE id = %s", (job_id,)).fetchone() is None

    def latencies(self, ids: list[int]) -> list[tuple[float, float]]:
        # The log gets a row per transition, stamped now() in the enqueue, dequeue and (buffered) completion.
        return self._rows(
            "SELECT extract(epoch FROM p.created - q.created), extract(epoch FROM f.created - q.created) FROM pgqueuer_log q "
            "JOIN pgqueuer_log p ON p.job_id = q.job_id AND p.status = 'picked' "
            "JOIN pgqueuer_log f ON f.job_id = q.job_id AND f.status = 'successful' "
            "WHERE q.status = 'queued' AND q.job_id = ANY(%s)",
            ids,
        )


ALL = (QueueWorkflows, QueueWorkflowsBatch, QueueWorkflowsBatchTenants, PgQueuer, Procrastinate)


def select(names: str) -> list[type[System]]:
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {c.name for c in ALL})
    if unknown:
        raise SystemExit(f"unknown system(s): {', '.join(unknown)} (known: {', '.join(c.name for c in ALL)})")
    return [c for c in ALL if c.name in wanted]


def start_workers(system: System, procs: Procs, n: int, timeout: float = 30.0) -> list:
    """Start `n` workers and return once all of them are ready (raises if one dies first)."""
    started = system.spawn_workers(procs, n)

    def ready() -> bool:
        procs.check_alive(started)
        return system.ready_count() >= n

    try:
        testing.wait_until(ready, timeout=timeout, interval=0.1, what=f"{n} {system.name} worker(s) ready")
    except BaseException:
        procs.stop(started)
        raise
    time.sleep(0.5)  # let the last one settle into its wait
    return started
