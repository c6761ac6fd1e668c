"""A real PgBouncer in front of a test's own database: its own ini, port and log, started and restarted by the test."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import conninfo

PGBOUNCER = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None)
SKIP_REASON = "the pgbouncer binary is not installed (apt-get install pgbouncer)"
# PgBouncer refuses to run as root; under root it runs as the user pgserver runs Postgres as.
RUN_AS = "pgserver" if os.geteuid() == 0 else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """One pgbouncer process for one database of the test, in `pool_mode`, on a port of its own."""

    def __init__(self, database_url: str, pool_mode: str, *, pool_size: int = 4) -> None:
        assert PGBOUNCER is not None, SKIP_REASON
        target = conninfo.conninfo_to_dict(database_url)
        self.dbname = str(target["dbname"])
        self.pool_mode = pool_mode
        self.port = free_port()
        # Not under tmp_path (0700, root's): the unprivileged user must reach its own files.
        self.dir = Path(tempfile.mkdtemp(prefix="qw-pgbouncer-"))
        self.ini = self.dir / "pgbouncer.ini"
        self.log = self.dir / "pgbouncer.log"
        server = f"host={target.get('host') or '/tmp'} port={target.get('port') or 5432} dbname={self.dbname} user={target.get('user') or 'postgres'}"
        self.ini.write_text(
            "[databases]\n"
            f"{self.dbname} = {server}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.dir}\n"
            "auth_type = any\n"  # the database line names the server login; the test's own server trusts it
            f"pool_mode = {pool_mode}\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 200\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
            "server_reset_query = DISCARD ALL\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        if RUN_AS:
            owner = pwd.getpwnam(RUN_AS)
            for path in (self.dir, self.ini):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"postgresql://{target.get('user') or 'postgres'}@127.0.0.1:{self.port}/{self.dbname}"

    def start(self, *, timeout: float = 15.0) -> None:
        argv = [str(PGBOUNCER), *(["-u", RUN_AS] if RUN_AS else []), str(self.ini)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=2, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"pgbouncer did not start (rc={self.proc.poll()}):\n{self.log_text()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # immediate shutdown: every client connection is cut
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
