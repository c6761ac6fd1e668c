"""TLS to Postgres: verify-full with deploy/make-tls.sh's CA works, and a TLS misconfiguration is exit 2."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from queue_workflows import db

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="deploy/make-tls.sh gives the key to root:postgres, so it runs as root")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin(name: str) -> str | None:
    """The system Postgres's programs: pgserver's own build has no TLS."""
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(found[-1]) if found else shutil.which(name)


class TlsPostgres:
    """A Postgres of the test's own on a TCP port, serving deploy/make-tls.sh's certificate."""

    def __init__(self, base: Path) -> None:
        self.certs = base / "certs"
        env = {**os.environ, "QW_PG_TLS_DIR": str(self.certs / "tls"), "QW_DB_CA_DIR": str(self.certs / "ca"),
               "QW_CA_PRIVATE_DIR": str(self.certs / "private"), "QW_PG_GID": str(os.getgid())}
        self.make_tls = lambda *names: subprocess.run(
            [str(REPO / "deploy" / "make-tls.sh"), *names], env=env, check=True, capture_output=True, text=True, timeout=60)
        self.make_tls("localhost")
        self.ca = self.certs / "ca" / "ca.crt"
        # initdb refuses root: run the server as an unprivileged user.
        self.user = next(u for u in ("postgres", "pgserver", "nobody") if _has_user(u))
        self.home = base / "pg"
        self.home.mkdir()
        shutil.chown(self.home, self.user)
        self.pgdata, self.sock, self.port = self.home / "data", self.home, _free_port()
        subprocess.run([str(_pg_bin("initdb")), "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, timeout=60, user=self.user)
        for name in ("server.crt", "server.key"):  # Postgres wants a key of its own user's to be 0600
            shutil.copy(self.certs / "tls" / name, self.pgdata / name)
            shutil.chown(self.pgdata / name, self.user)
            os.chmod(self.pgdata / name, 0o600)
        with open(self.pgdata / "postgresql.conf", "a") as conf:
            conf.write(f"ssl = on\nssl_cert_file = '{self.pgdata / 'server.crt'}'\nssl_key_file = '{self.pgdata / 'server.key'}'\n"
                       f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.sock}'\n"
                       "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")  # a throwaway server, as conftest's
        self.pg_ctl("-w", "-l", str(self.home / "log"), "start")
        self.admin = f"postgresql://postgres@/postgres?host={self.sock}&port={self.port}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE qw_tls")
        db.bootstrap(url=self.admin.replace("/postgres?", "/qw_tls?"))

    def pg_ctl(self, *args: str) -> None:
        subprocess.run([str(_pg_bin("pg_ctl")), "-D", str(self.pgdata), *args], check=True, capture_output=True,
                       timeout=60, user=self.user)

    def url(self, host: str = "localhost", port: int | None = None, **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://postgres@{host}:{port or self.port}/qw_tls?{query}"

    def set_ssl(self, on: bool) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET ssl = {'on' if on else 'off'}")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 10
        while True:  # the reload reaches the postmaster asynchronously: poll a new session's view
            with psycopg.connect(self.admin, autocommit=True) as conn:
                if conn.execute("SHOW ssl").fetchone() == ("on" if on else "off",):
                    return
            assert time.monotonic() < deadline, "ssl setting not reloaded"
            time.sleep(0.05)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="module")
def tls_pg() -> Iterator[TlsPostgres]:
    if _pg_bin("initdb") is None:
        pytest.skip("no system Postgres (initdb) with TLS")
    base = Path(tempfile.mkdtemp(prefix="qw-pg-tls-"))  # not tmp_path: see conftest's private_pg
    os.chmod(base, 0o755)
    try:
        server = TlsPostgres(base)
        try:
            yield server
        finally:
            server.pg_ctl("-w", "-m", "immediate", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def qw_status(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QW_DATABASE_URL": url, "PGCONNECT_TIMEOUT": "5"}
    env.pop("QW_DATABASE_PASSWORD_FILE", None)
    return subprocess.run([sys.executable, "-m", "qw_services.cli", "status"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def assert_config_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(word in lines[0] for word in words), lines[0]


def test_make_tls_writes_a_key_postgres_reads_and_no_one_else(tls_pg: TlsPostgres) -> None:
    key = (tls_pg.certs / "tls" / "server.key").stat()
    assert (key.st_uid, key.st_gid, key.st_mode & 0o777) == (0, os.getgid(), 0o640)
    assert (tls_pg.certs / "private" / "ca.key").stat().st_mode & 0o077 == 0
    before = {p.name: p.read_bytes() for p in (tls_pg.certs / "tls").iterdir()}
    tls_pg.make_tls("localhost")  # the same names: nothing changes
    assert before == {p.name: p.read_bytes() for p in (tls_pg.certs / "tls").iterdir()}
    ca = tls_pg.ca.read_bytes()
    tls_pg.make_tls("localhost", "head.example", "10.1.2.3")  # other names: a new certificate, the same CA
    assert (tls_pg.certs / "tls" / "server.crt").read_bytes() != before["server.crt"] and tls_pg.ca.read_bytes() == ca
    sans = subprocess.run(["openssl", "x509", "-in", str(tls_pg.certs / "tls" / "server.crt"), "-noout", "-ext", "subjectAltName"],
                          capture_output=True, text=True, check=True).stdout
    assert all(name in sans for name in ("DNS:postgres", "DNS:localhost", "DNS:head.example", "IP Address:10.1.2.3")), sans


def test_verify_full_with_the_ca_and_a_name_in_the_certificate_succeeds(tls_pg: TlsPostgres) -> None:
    proc = qw_status(tls_pg.url(sslmode="verify-full", sslrootcert=str(tls_pg.ca)))
    assert proc.returncode == 0, proc.stderr


def test_a_wrong_ca_is_a_configuration_error(tls_pg: TlsPostgres, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=other", "-days", "1",
                    "-keyout", str(tmp_path / "other.key"), "-out", str(other)], check=True, capture_output=True)
    assert_config_error(qw_status(tls_pg.url(sslmode="verify-full", sslrootcert=str(other))), "TLS", "certificate")


def test_a_name_not_in_the_certificate_is_a_configuration_error(tls_pg: TlsPostgres) -> None:
    proc = qw_status(tls_pg.url(host="127.0.0.1", sslmode="verify-full", sslrootcert=str(tls_pg.ca)))
    assert_config_error(proc, "TLS", "does not match host name")


def test_a_missing_ca_file_is_a_configuration_error(tls_pg: TlsPostgres, tmp_path: Path) -> None:
    proc = qw_status(tls_pg.url(sslmode="verify-full", sslrootcert=str(tmp_path / "absent.crt")))
    assert_config_error(proc, "TLS", "does not exist")


def test_a_server_without_tls_is_a_configuration_error_and_a_down_one_is_not(tls_pg: TlsPostgres) -> None:
    tls_pg.set_ssl(False)
    try:
        assert_config_error(qw_status(tls_pg.url(sslmode="require")), "TLS", "does not support SSL")
    finally:
        tls_pg.set_ssl(True)
    down = qw_status(tls_pg.url(port=_free_port(), sslmode="require"))
    assert down.returncode == 1, (down.returncode, down.stderr)
    assert "cannot reach Postgres" in down.stderr


def test_the_sidecar_names_a_tls_misconfiguration_and_keeps_sampling(tls_pg: TlsPostgres, tmp_path: Path, caplog) -> None:
    """The hw-metrics sidecar outlives database trouble, but a TLS mistake is told as one, not as an outage."""
    from queue_workflows.telemetry.sidecar import Sidecar

    sidecar = Sidecar(database_url=tls_pg.url(sslmode="verify-full", sslrootcert=str(tmp_path / "absent.crt")))
    with caplog.at_level("WARNING", logger="queue_workflows.telemetry.sidecar"):
        assert sidecar.publish(sidecar.sample()) is False
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors and "TLS to Postgres" in errors[0] and "sslrootcert" in errors[0], [r.getMessage() for r in caplog.records]
    assert not any("database unavailable" in r.getMessage() for r in caplog.records)
    assert sidecar.state.database_up is False
