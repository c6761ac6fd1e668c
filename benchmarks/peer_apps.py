"""The same no-op task for the peer queues, each through its documented API.

procrastinate: `python -m procrastinate --app=peer_apps.procrastinate_app worker --queues=bench --concurrency=1`
pgqueuer:      `python -c "import peer_apps; peer_apps.run_pgqueuer_worker()"`: `pgqueuer.run(pgqueuer_factory)`
               on uvloop, which is what `pgq run peer_apps:pgqueuer_factory` does; the `pgq run` CLI
               itself cannot start in pgqueuer 1.6.0 with typer 0.29 (its --log-level parser hands a
               str to setup_fancy_logger, which then fails on `level.name`). Imported rather than run
               as __main__, so procrastinate does not warn about an app in the main module.

The database each one uses comes from BENCH_PROCRASTINATE_URL / BENCH_PGQUEUER_URL;
BENCH_PGQUEUER_DRIVER=psycopg|asyncpg picks pgqueuer's driver (default: asyncpg when installed).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import procrastinate
from pgqueuer import PgQueuer
from pgqueuer.models import Job

PROCRASTINATE_QUEUE = "bench"


def make_procrastinate_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue=PROCRASTINATE_QUEUE)
    def noop() -> None:  # a sync task, like the qw one
        return None

    return app


procrastinate_app = make_procrastinate_app(os.environ.get("BENCH_PROCRASTINATE_URL", ""))


def pgqueuer_driver_name() -> str:
    """asyncpg (pgqueuer's default and documented driver) when installed, else psycopg."""
    wanted = os.environ.get("BENCH_PGQUEUER_DRIVER", "")
    if wanted:
        return wanted
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "psycopg"
    return "asyncpg"


@contextlib.asynccontextmanager
async def pgqueuer_factory() -> AsyncIterator[PgQueuer]:
    """`pgq run` factory (an async context manager in 1.6): pgqueuer over one connection."""
    url = os.environ["BENCH_PGQUEUER_URL"]
    if pgqueuer_driver_name() == "asyncpg":
        import asyncpg
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(url)  # a libpq DSN or URI, as the other systems get
        conn = await asyncpg.connect(
            host=params.get("host"), port=int(params.get("port") or 5432), user=params.get("user"),
            password=params.get("password") or None, database=params.get("dbname"),
        )
        pgq = PgQueuer.from_asyncpg_connection(conn)
    else:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        pgq = PgQueuer.from_psycopg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    try:
        yield pgq
    finally:
        await conn.close()


def run_pgqueuer_worker() -> None:
    import logging

    import pgqueuer

    logging.basicConfig(level=os.environ.get("BENCH_PEER_LOG_LEVEL", "WARNING"))
    try:
        import uvloop

        uvloop.run(pgqueuer.run(pgqueuer_factory))
    except ImportError:
        import asyncio

        asyncio.run(pgqueuer.run(pgqueuer_factory))

