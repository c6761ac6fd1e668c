"""The one loader of named SQL (`-- name: x`) kept in a `.sql` file beside the code of its concern."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

from psycopg import sql

_NAME_RE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)

JobTable = Literal["workflow_node_jobs", "ingest_jobs"]
RESULT_COLUMN: dict[str, str] = {"workflow_node_jobs": "context_delta", "ingest_jobs": "result"}
# `{clear_unassignable}`: a claim or a terminal mark clears the gpu sweep's "no live worker fits" flag,
# which only node jobs carry (migration 0023); once a worker has taken the job, the flag is no longer true.
CLEAR_UNASSIGNABLE: dict[str, str] = {"workflow_node_jobs": "unassignable_reason = NULL,", "ingest_jobs": ""}


def clear_unassignable(table: str) -> sql.SQL:
    """The `{clear_unassignable}` fragment for `table` (a fixed text; empty for a table without the flag)."""
    return sql.SQL(CLEAR_UNASSIGNABLE.get(table, ""))


class SqlFileError(ValueError):
    """A .sql file that cannot serve its names (a name twice, or text before the first name)."""


def parse(text: str, origin: str = "<text>") -> dict[str, str]:
    """Each `-- name: x` section's statement, without comment lines or the trailing semicolon."""
    parts = _NAME_RE.split(text)
    if any(not line.lstrip().startswith("--") for line in parts[0].strip().splitlines()):
        raise SqlFileError(f"{origin}: SQL before the first '-- name:' line belongs to no name")
    statements: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in statements:
            raise SqlFileError(f"{origin}: the name {name!r} is defined twice")
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        statements[name] = "\n".join(lines).strip().rstrip(";")
    return statements


class Queries:
    """The named statements of one file: `q["x"]` is the text, `q.sql("x", table)` the composed statement.

    Code names a statement with a literal (`Q["x"]`, `Q.sql("x")`) on a module-level
    `Q = sqlfile.load(...)`, so tests/test_sql_files.py can check every name against the file.
    """

    def __init__(self, origin: str, statements: dict[str, str]) -> None:
        self.origin = origin
        self._statements = statements

    def __getitem__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise KeyError(f"{self.origin} defines no query named {name!r}") from None

    def names(self) -> list[str]:
        return list(self._statements)

    def sql(self, name: str, table: JobTable | str | None = None) -> sql.SQL | sql.Composed:
        """The statement, with `{table}` (and, for a job table, `{result_column}` and `{clear_unassignable}`) bound to fixed text."""
        return _compose(self, name, table)


@cache
def _compose(queries: Queries, name: str, table: str | None) -> sql.SQL | sql.Composed:
    text = sql.SQL(queries[name])
    if table is None:
        return text
    if not table.isidentifier():
        raise ValueError(f"not a table name: {table!r}")
    column = RESULT_COLUMN.get(table)
    return text.format(table=sql.Identifier(table), result_column=sql.Identifier(column) if column else sql.SQL(""),
                       clear_unassignable=clear_unassignable(table))


@cache
def load(package: str, filename: str) -> Queries:
    """The named statements of `filename` in `package` (read once, shipped as package data)."""
    origin = f"{package.replace('.', '/')}/{filename}"
    return Queries(origin, parse(resources.files(package).joinpath(filename).read_text(), origin))
