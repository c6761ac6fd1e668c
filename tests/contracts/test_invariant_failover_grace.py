"""Contract 4 across a failover: advisory locks are not replicated, so on a promoted standby no
worker holds its lock until it reconnects. A job claimed on the old primary keeps its worker's
grace period, as after a restart; one claimed on the new primary is reclaimed at once when its
worker is gone. A real standby: pg_basebackup of a private server, streaming, then promoted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from procs import query, wait_until

import queue_workflows
from queue_workflows import node_queue, register_ingest_task
from queue_workflows.jobstore import Claimant
from queue_workflows.leader import reclaim

pytestmark = pytest.mark.timeout(120)


class Standby:
    """A streaming standby of `primary` (tests/support/procs.PrivatePostgres), run with the same binaries and user."""

    def __init__(self, primary, base: Path) -> None:
        from pgserver import _commands

        self.commands = _commands
        self.user = primary.server.system_user
        self.pgdata = base / "standby"
        self.socket_dir = base / "standby-socket"
        self.socket_dir.mkdir()
        if self.user is not None and os.geteuid() == 0:
            shutil.chown(base, self.user)
            shutil.chown(self.socket_dir, self.user)
        self.commands.pg_basebackup(["-D", str(self.pgdata), "-R", "-X", "stream", "-c", "fast", "-h", str(primary.socket_dir), "-U", "postgres"],
                                    user=self.user, timeout=60)
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(base / "standby.log"), "start")

    def _pg_ctl(self, *args: str) -> None:
        self.commands.pg_ctl(list(args), pgdata=self.pgdata, user=self.user, timeout=60)

    def promote(self) -> None:
        self._pg_ctl("-w", "promote")

    def stop(self) -> None:
        self._pg_ctl("-w", "-m", "immediate", "stop")


def test_a_promotion_gives_jobs_claimed_on_the_old_primary_the_grace_period(private_pg, private_database_url):
    register_ingest_task("t", lambda reason: {})
    base = Path(private_pg.server.pgdata).parent / "failover"
    base.mkdir()
    standby = Standby(private_pg, base)
    standby_url = private_database_url.replace(str(private_pg.socket_dir), str(standby.socket_dir))
    assert standby_url != private_database_url, private_database_url
    try:
        queue_workflows.configure(database_url=private_database_url, ingest_queues=frozenset({"fetch"}), lease_seconds=3600)
        node_queue.enqueue_ingest_job("t", "fetch")
        job = node_queue.claim_ingest_job("fetch", Claimant("w", 7101))  # its worker's lock lived on the old primary only
        lsn = query(private_database_url, "SELECT pg_current_wal_lsn()::text AS lsn")[0]["lsn"]
        wait_until(lambda: query(standby_url, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn AS ok", (lsn,))[0]["ok"],
                   timeout=30, interval=0.05, what="the standby to replay the claim")
        private_pg.stop()  # the primary's box dies
        standby.promote()
        queue_workflows.configure(database_url=standby_url, ingest_queues=frozenset({"fetch"}), lease_seconds=3600)
        assert reclaim.reclaim_orphans() == [], "a worker reconnecting after a failover must get time to retake its lock"
        assert query(standby_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],))[0]["status"] == "running"
        node_queue.enqueue_ingest_job("t", "fetch")
        fresh = node_queue.claim_ingest_job("fetch", Claimant("w", 7102))  # on the new primary, its worker gone
        assert [r["id"] for r in reclaim.reclaim_orphans()] == [fresh["id"]]
    finally:
        standby.stop()
