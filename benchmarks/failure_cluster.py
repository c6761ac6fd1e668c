"""The failure matrix's cluster on one machine: a Postgres it can restart, cut off and fill, the services, the load and the probe seats.

Built from the test suite's own fault fixtures (tests/support: a private Postgres, PgBouncer,
a network namespace, a small tmpfs), so the matrix injects each fault exactly as its invariant
test does, but under the steady load and several times over.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import common
import psycopg
from psycopg import conninfo, sql
from psycopg.rows import dict_row

from queue_workflows import testing

sys.path.insert(0, str(common.BENCH_DIR.parent / "tests" / "support"))
import netns as netns_support  # noqa: E402
import pgbouncer as pgbouncer_support  # noqa: E402
import small_disk  # noqa: E402
from procs import PrivatePostgres  # noqa: E402

# The backends holding a worker lock (classid 20823, as the view qw_worker_sessions reads them) in this database.
WORKER_LOCKS = """
SELECT DISTINCT l.pid, statement_timestamp() AS t FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid::bigint = 20823
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
TAKER_HOST = "taker"
# A log line's time stamp, and its logger's process[pid] and module: the role and the level say enough.
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+\s+")
ORIGIN = re.compile(r"^([A-Z]+)\s+\S+\[\d+\] [\w.]+: ")


class Cluster:
    """Everything one matrix run starts; `close()` stops all of it."""

    def __init__(self, database_url: str | None, *, lease: float, rate: float, dag_rate: float, keep_logs: bool) -> None:
        self.lease, self.rate, self.dag_rate = lease, rate, dag_rate
        self.work = Path(tempfile.mkdtemp(prefix="qwfail-"))
        os.chmod(self.work, 0o777)  # a worker in the namespace runs as root too, but keep the files reachable
        self.exec_log, self.acked_log = self.work / "executions.jsonl", self.work / "acked.jsonl"
        self.procs = common.Procs(keep_logs)
        self.pg: PrivatePostgres | None = None
        self.netns: netns_support.Netns | None = None
        self.disk: small_disk.SmallDisk | None = None
        self.bouncer: pgbouncer_support.PgBouncer | None = None
        self.skips: dict[str, str] = {}
        self.producer: subprocess.Popen[bytes] | None = None
        self.orchestrators: list[subprocess.Popen[bytes]] = []
        self.taker: subprocess.Popen[bytes] | None = None
        self.seats = self.spawned = 0
        self.spare: tuple[tuple[Any, ...], subprocess.Popen[bytes], str] | None = None  # the next trial's target, parked
        self.more_trials = False  # set by the caller before each trial: whether another of the same fault follows
        self.notes: list[str] = []  # what a trial adds to its row's "operator sees"
        try:
            self._start_postgres(database_url)
        except BaseException:
            self.close()
            raise

    # -- Postgres, the namespace, the disk, PgBouncer ----------------------------------------

    def _start_postgres(self, database_url: str | None) -> None:
        if database_url:
            self.admin_url = database_url
            for fault in ("pg_restart", "full_disk", "partition"):
                self.skips[fault] = "needs a Postgres this run starts itself (not --database-url)"
        else:
            self.pg = PrivatePostgres(self.work / "pgdata")
            self.admin_url = self.pg.admin_url
            # Acknowledged means durable here: an immediate restart must not drop commits already answered.
            self.sql(self.admin_url, "ALTER SYSTEM SET synchronous_commit = on")
            why = netns_support.unavailable()
            if why is None:
                self.netns = netns_support.Netns()
                with open(Path(self.pg.server.pgdata) / "pg_hba.conf", "a") as hba:
                    hba.write(f"host all all {self.netns.ns_ip}/32 trust\n")
            else:
                self.skips["partition"] = f"partitions {why}"
            self.pg.stop()
            self.pg.start(listen=self.netns.host_ip if self.netns else "")
        self.url = self._create_database()
        from queue_workflows import db

        db.bootstrap(url=self.url)
        if pgbouncer_support.PGBOUNCER is None:
            self.skips["pgbouncer"] = pgbouncer_support.SKIP_REASON
        else:
            self.bouncer = pgbouncer_support.PgBouncer(self.url, "transaction", pool_size=4)
            # PgBouncer waits server_login_retry (default 15 s) after a failed server login: across a Postgres restart
            # that held every producer off for ~14 s. 1 s, as docs/failure-matrix.md recommends.
            self.bouncer.ini.write_text(self.bouncer.ini.read_text() + "server_login_retry = 1\n")
            self.bouncer.start()
        if faketime_lib() is None:
            self.skips["clock_skew"] = "needs libfaketime (apt-get install faketime)"

    def _create_database(self) -> str:
        if self.pg is None or os.geteuid() != 0:
            self.skips.setdefault("full_disk", small_disk.SKIP_REASON)
            return testing.create_database(self.admin_url, "qwfail")
        try:
            self.disk = small_disk.SmallDisk(256, self.pg.server.system_user or "pgserver")
        except subprocess.CalledProcessError as exc:
            self.skips["full_disk"] = f"cannot mount a tmpfs here: {exc.stderr.decode(errors='replace').strip()}"
            return testing.create_database(self.admin_url, "qwfail")
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE TABLESPACE qwfail_small LOCATION {}").format(sql.Literal(str(self.disk.path))))
            admin.execute("CREATE DATABASE qwfail TABLESPACE qwfail_small")
        return self.pg.server.get_uri("qwfail")

    def restart_postgres(self, mode: str) -> None:
        assert self.pg is not None
        from queue_workflows import db

        self.pg._pg_ctl("-w", "-m", mode, "stop")
        self.pg.start(listen=self.netns.host_ip if self.netns else "")
        db.close_pools()  # this process's pooled connections died with the server: the next call opens fresh ones

    def tcp_url(self) -> str:
        assert self.netns is not None
        return conninfo.make_conninfo(self.url, host=self.netns.host_ip, port="5432")

    # -- queries -----------------------------------------------------------------------------

    @staticmethod
    def sql(url: str, query: str, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=5) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def q(self, query: str, params: Any = None) -> list[dict[str, Any]] | None:
        """Rows, or None while the database cannot answer (a restart, a full disk): for polling across a fault."""
        try:
            return self.sql(self.url, query, params)
        except psycopg.OperationalError:
            return None

    def one(self, query: str, params: Any = None) -> Any:
        rows = self.q(query, params)
        return next(iter(rows[0].values())) if rows else None

    def db_now(self) -> datetime:
        return self.sql(self.url, "SELECT clock_timestamp() AS t")[0]["t"]

    def poll(self, query: str, params: Any = None, *, timeout: float, what: str, interval: float = 0.01) -> Any:
        """The first non-null value of `query`'s first column, polled; TimeoutError naming `what`."""
        return testing.wait_until(lambda: self.one(query, params), timeout=timeout, interval=interval, what=what)

    # -- processes ---------------------------------------------------------------------------

    def env(self, url: str | None = None, **extra: str) -> dict[str, str]:
        return common.child_env(
            url or self.url, QW_APP="failure_app", QW_INGEST_QUEUES="fetch,probe", QW_NODE_PACKAGES="failure_app",
            QW_LEASE_SECONDS=f"{self.lease:g}", QW_LEASE_RENEW_SECONDS=f"{self.lease / 6:g}", QW_HEARTBEAT_SECONDS="1",
            QW_MAX_ATTEMPTS="100", QW_LOG_LEVEL="INFO", QW_DB_NETWORK_TIMEOUT_SECONDS="2", QW_LEADER_LEASE_SECONDS="2",
            FAILURE_EXEC_LOG=str(self.exec_log), **extra)

    def worker(self, queue: str, *, host: str = "matrix", argv: list[str] | None = None, url: str | None = None,
               name: str | None = None, **extra: str) -> subprocess.Popen[bytes]:
        command = [*(argv or []), sys.executable, "-m", "qw_services.worker", f"--queue={queue}"]
        return self.procs.spawn(name or f"worker-{queue}-{host}", command, self.env(url, QW_HOST_LABEL=host, **extra))

    def orchestrator(self) -> subprocess.Popen[bytes]:
        proc = self.procs.qw_orchestrator(self.env())
        self.orchestrators.append(proc)
        return proc

    def ready(self, workers: list[subprocess.Popen[bytes]], *, state: str | None = None, timeout: float = 60) -> None:
        pids = [w.pid for w in workers]

        def all_ready() -> bool:
            self.procs.check_alive(workers)
            query = "SELECT count(*) FROM worker_heartbeats WHERE pid = ANY(%s) AND (%s::text IS NULL OR state = %s)"
            return self.one(query, (pids, state, state)) == len(pids)

        testing.wait_until(all_ready, timeout=timeout, interval=0.05, what=f"workers {pids} ready")

    def start(self) -> None:
        """Two orchestrators, two workers on `fetch`, one on `cpu` (the DAG nodes), the probe taker, then the producer."""
        self.orchestrator()
        self.poll("SELECT o.pid FROM qw_orchestrators o JOIN qw_leadership l ON o.epoch = l.epoch WHERE o.role = 'leader'",
                  timeout=60, what="a leader", interval=0.1)
        self.orchestrator()
        load = [self.worker("fetch"), self.worker("fetch"), self.worker("cpu")]
        self.taker = self.worker("probe", host=TAKER_HOST)
        self.ready([*load, self.taker])
        producer_url = self.bouncer.url if self.bouncer else self.url
        code = "import sys, failure_load; sys.exit(failure_load.main(sys.argv[1:]))"
        self.producer = self.procs.spawn("producer", [sys.executable, "-c", code, producer_url, f"{self.rate:g}",
                                                     f"{self.dag_rate:g}", str(self.acked_log)], self.env())
        testing.wait_until(lambda: self.one("SELECT count(*) FROM workflow_runs WHERE status = 'completed'"),
                           timeout=60, what="the load to run")

    def live_workers(self) -> int:
        """Worker processes still running (each holds its lock on two connections)."""
        return sum(1 for p in self.procs.started if "worker" in str(getattr(p, "log_path", "")) and p.poll() is None)

    def leader_pid(self) -> int:
        return int(self.poll("SELECT o.pid FROM qw_orchestrators o JOIN qw_leadership l ON o.epoch = l.epoch "
                             "WHERE o.role = 'leader' AND l.lease_until > now()", timeout=30, what="a leader"))

    # -- the probe seat: a target worker running one job, and a taker idle beside it ---------------

    def seat(self, *, argv: list[str] | None = None, url: str | None = None, kind: str = "target", spare: bool = True,
             **extra: str) -> subprocess.Popen[bytes]:
        """Park the taker and seat a target worker on `probe`, ready; the taker stays parked until `unpark()`.

        The target is the spare started (parked) during the previous trial when it fits, so a trial does not wait
        for a Python process to start; with `spare` and `more_trials`, the next trial's spare is started now.
        """
        from queue_workflows import worker_control

        self.seats += 1
        spec = (kind, tuple(argv or ()), url, tuple(sorted(extra.items())))
        worker_control.disable_worker(TAKER_HOST, "probe", "park", requested_by="failure-matrix")
        if self.spare is not None and (self.spare[0] != spec or self.spare[1].poll() is not None):
            self.procs.stop([self.spare[1]])
            self.spare = None
        if self.spare is not None:
            _, target, host = self.spare
            self.spare = None
            worker_control.enable_worker(host, "probe", requested_by="failure-matrix")
        else:
            target = self._target(spec, parked=False)
        assert self.taker is not None
        self.ready([self.taker], state="parked")
        self.ready([target], state="idle")
        if spare and self.more_trials:
            self.spare = (spec, self._target(spec, parked=True), f"target{self.spawned}")
        return target

    def _target(self, spec: tuple[Any, ...], *, parked: bool) -> subprocess.Popen[bytes]:
        from queue_workflows import worker_control

        kind, argv, url, extra = spec
        self.spawned += 1
        host = f"target{self.spawned}"
        if parked:  # a worker whose switch is OFF when it starts starts parked (docs/worker_control.md)
            worker_control.disable_worker(host, "probe", "park", requested_by="failure-matrix")
        return self.worker("probe", host=host, argv=list(argv) or None, url=url, name=f"worker-probe-{kind}{self.spawned}", **dict(extra))

    def run_probe(self, target: subprocess.Popen[bytes], *, hold: float, again: float = 0.0) -> int:
        """Enqueue a probe job and wait until the target runs it; its id."""
        from queue_workflows import node_queue

        job = int(node_queue.enqueue_ingest_job("probe", "probe", {"key": f"x{self.seats}", "hold": hold, "again": again})["id"])
        self.procs.check_alive([target])
        self.poll("SELECT 1 FROM ingest_jobs WHERE id = %s AND status = 'running' AND split_part(claimed_by, ':', 3) = %s",
                  (job, str(target.pid)), timeout=30, what=f"probe {job} running on the target")
        return job

    def unpark(self) -> None:
        from queue_workflows import worker_control

        worker_control.enable_worker(TAKER_HOST, "probe", requested_by="failure-matrix")
        assert self.taker is not None
        self.ready([self.taker], state="idle")

    def taken_over(self, job: int, target: subprocess.Popen[bytes], since: datetime, *, timeout: float) -> float:
        """Seconds (database clock) from `since` to the probe running (or done) on a worker other than the target."""
        return float(self.poll(
            "SELECT extract(epoch FROM started_at - %s::timestamptz)::float FROM ingest_jobs WHERE id = %s "
            "AND status IN ('running', 'completed') AND split_part(claimed_by, ':', 3) <> %s",
            (since, job, str(target.pid)), timeout=timeout, what=f"probe {job} taken over"))

    def wait_done(self, job: int, *, timeout: float = 60) -> dict[str, Any]:
        self.poll("SELECT 1 FROM ingest_jobs WHERE id = %s AND status = 'completed'", (job,), timeout=timeout, what=f"probe {job} done")
        return self.sql(self.url, "SELECT * FROM ingest_jobs WHERE id = %s", (job,))[0]

    # -- logs --------------------------------------------------------------------------------

    def log_marks(self) -> dict[Path, int]:
        paths = [Path(p.log_path) for p in self.procs.started if getattr(p, "log_path", None)]
        return {path: path.stat().st_size for path in paths if path.exists()}

    def lines_since(self, marks: dict[Path, int]) -> list[tuple[str, str]]:
        """(role, line without its time stamp) written by every process since `marks`."""
        found = []
        for proc in self.procs.started:
            path = Path(proc.log_path)
            if not path.exists():
                continue
            with open(path, "rb") as log:
                log.seek(marks.get(path, 0))
                text = log.read().decode(errors="replace")
            role = re.sub(r"^\d+-", "", path.stem)
            found += [(role, ORIGIN.sub(r"\1 ", STAMP.sub("", line)).strip()) for line in text.splitlines() if line.strip()]
        return found

    def qw_status(self) -> subprocess.Popen[str]:
        """`qw status` (what an operator runs), started in the background; read with `.communicate()`."""
        return subprocess.Popen([sys.executable, "-m", "qw_services.cli", "status"], env=self.env(), cwd=common.BENCH_DIR,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    # -- the end -----------------------------------------------------------------------------

    def stop_producer(self) -> None:
        if self.producer is not None:
            self.procs.stop([self.producer], timeout=30)

    def close(self) -> None:
        from queue_workflows import db

        with contextlib.suppress(Exception):
            self.procs.close()
        db.close_pools()
        if self.bouncer is not None:
            self.bouncer.close()
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.close()
        elif hasattr(self, "url"):
            common.drop_database(self.admin_url, self.url)
        if self.disk is not None:
            self.disk.free()
            self.disk.close()
        if self.netns is not None:
            self.netns.close()
        if not self.procs.keep_logs:
            import shutil

            shutil.rmtree(self.work, ignore_errors=True)


def faketime_lib() -> str | None:
    import glob

    return next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))), None)


def kill(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    os.kill(proc.pid, sig)
