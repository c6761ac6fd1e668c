"""Writes docs/schema.sql: the engine's whole schema as its migrations leave it, one place to read a table."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from queue_workflows import db

HEADER = (
    "-- The engine's schema as migrations {first:04d}-{last:04d} leave a fresh database (pg_dump --schema-only).\n"
    "-- Generated: do not edit. Regenerate with `python -m queue_workflows.ops.schema_dump` after adding a\n"
    "-- migration; tests/test_schema_snapshot.py fails while this file and the migrations disagree.\n"
)
DEFAULT_OUTPUT = Path(__file__).resolve().parents[3] / "docs" / "schema.sql"
# pg_dump's preamble and bookkeeping: session settings, comments, and the random \restrict key of newer releases.
_NOISE = re.compile(r"^(--.*|SET .*|SELECT pg_catalog\.set_config\(.*|\\(un)?restrict .*)$")


def pg_dump_path() -> str:
    """The pg_dump shipped with pgserver (the version the snapshot is written with), else the one on PATH."""
    try:
        import pgserver
    except ImportError:
        pass
    else:
        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("pg_dump")
    if found is None:
        raise FileNotFoundError("pg_dump not found: install the 'embedded' extra (pgserver) or the PostgreSQL client")
    return found


def normalize(dump: str) -> str:
    """The statements alone, without preamble, comments or runs of blank lines, so the file diffs cleanly."""
    lines = [line.rstrip() for line in dump.splitlines() if not _NOISE.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def migration_range() -> tuple[int, int]:
    versions = [migration.version for migration in db.discover()]
    return min(versions), max(versions)


def schema_of(url: str) -> str:
    """The schema of the database at `url` as it stands, normalized (migration tests compare these)."""
    out = subprocess.run([pg_dump_path(), "--schema-only", "--no-owner", "--dbname", url],
                         check=True, capture_output=True, text=True).stdout
    return normalize(out)


def dump(url: str) -> str:
    """Migrate the empty database `url` and return the snapshot text (header included)."""
    db.bootstrap(url=url)
    first, last = migration_range()
    return HEADER.format(first=first, last=last) + "\n" + schema_of(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m queue_workflows.ops.schema_dump", description=__doc__)
    parser.add_argument("--database-url", help="an empty database to migrate and dump (default: a throwaway embedded server)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write (default: docs/schema.sql)")
    args = parser.parse_args(argv)
    if args.database_url:
        text = dump(args.database_url)
    else:
        import pgserver

        with tempfile.TemporaryDirectory(prefix="qw-schema-") as pgdata:
            server = pgserver.get_server(pgdata, cleanup_mode="stop")
            try:
                text = dump(server.get_uri())
            finally:
                server._cleanup()  # noqa: SLF001 - pgserver has no public stop
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
