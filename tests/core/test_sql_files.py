"""Every named query parses against the migrated schema, has one home, is used, and every name code uses exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from queue_workflows import queries
from queue_workflows.common import sqlfile
from queue_workflows.worker.batch.worker import claim_batch_query

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"queue_workflows": ROOT / "engine/queue_workflows", "qw_services": ROOT / "services/qw_services"}
# Where code may name a query: the product (engine, services) and the tests, which use the same loader.
CODE_DIRS = [ROOT / "engine", ROOT / "services", ROOT / "examples", ROOT / "tests", ROOT / "benchmarks"]
JOB_TABLES = ("ingest_jobs", "workflow_node_jobs")
# Fragments of the claim (queries.claim_query), checked inside every claim it composes.
CLAIM_FRAGMENTS = {"claim_job", "gpu_claim_plan", "gpu_routing", "gpu_reserve", "claim_batch", "fair_order", "fair_bands", "fair_charge"}
PARAM = re.compile(r"%\((\w+)\)s")


def sql_files() -> dict[tuple[str, str], Path]:
    """(package, filename) of every named-SQL file; migrations are not named SQL."""
    found = {}
    for top, base in PACKAGE_DIRS.items():
        for path in sorted(base.rglob("*.sql")):
            if "migrations" in path.relative_to(base).parts:
                continue
            package = ".".join((top, *path.parent.relative_to(base).parts))
            found[(package, path.name)] = path
    return found


def defined() -> dict[str, tuple[str, str]]:
    """Every query name, and the one file that defines it."""
    homes: dict[str, list[tuple[str, str]]] = {}
    for key in sql_files():
        for name in sqlfile.load(*key).names():
            homes.setdefault(name, []).append(key)
    twice = {name: keys for name, keys in homes.items() if len(keys) > 1}
    assert not twice, f"a query name must have one home (grep finds it): {twice}"
    return {name: keys[0] for name, keys in homes.items()}


def _literal_names(node: ast.expr) -> list[str] | None:
    """The names a query-name argument can take, when they are literals (`"x"`, or `"x" if c else "y"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _literal_names(node.body), _literal_names(node.orelse)
        return body + orelse if body is not None and orelse is not None else None
    return None


def _is_load(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "load" and isinstance(node.func.value, ast.Name)
         and node.func.value.id == "sqlfile")
        or (isinstance(node.func, ast.Name) and node.func.id == "load")
    )


@cache
def scan(path: Path) -> tuple[list[tuple[tuple[str, str], str, int]], list[str]]:
    """The (file, name, line) every query access in `path` names, and the accesses no test can check."""
    text = path.read_text()
    if "load(" not in text:  # no loader, no query names: skip the parse
        return [], []
    tree = ast.parse(text, str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bound: dict[str, tuple[str, str]] = {}
    problems = []
    for node in ast.walk(tree):
        if not _is_load(node):
            continue
        assign = parents.get(node)
        args = [a.value for a in node.args if isinstance(a, ast.Constant)]  # type: ignore[attr-defined]
        if (isinstance(assign, ast.Assign) and parents.get(assign) is tree and len(assign.targets) == 1
                and isinstance(assign.targets[0], ast.Name) and len(args) == 2 == len(node.args)):
            bound[assign.targets[0].id] = (args[0], args[1])
        elif path.name != "sqlfile.py":
            problems.append(f"{path}:{node.lineno}: sqlfile.load(...) outside a module-level `NAME = sqlfile.load('pkg', 'file.sql')`")
    uses = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in bound and isinstance(node.ctx, ast.Load)):
            continue
        parent, names = parents[node], None
        if isinstance(parent, ast.Subscript):
            names = _literal_names(parent.slice)
        elif isinstance(parent, ast.Attribute) and parent.attr == "sql":
            call = parents.get(parent)
            if isinstance(call, ast.Call) and call.args:
                names = _literal_names(call.args[0])
        if names is None:
            problems.append(f"{path}:{node.lineno}: {node.id} must be used as {node.id}['name'] or {node.id}.sql('name', ...)")
        else:
            uses += [(bound[node.id], name, node.lineno) for name in names]
    return uses, problems


def code_files() -> Iterator[Path]:
    for base in CODE_DIRS:
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" not in path.parts and path != Path(__file__).resolve():  # this file reads every file
                yield path


def test_every_name_the_code_uses_is_defined_in_the_file_it_loads():
    files = sql_files()
    problems = []
    for path in code_files():
        uses, unchecked = scan(path)
        problems += unchecked
        for key, name, line in uses:
            if key not in files:
                problems.append(f"{path}:{line}: loads {key[0]}/{key[1]}, which is not a named-SQL file")
            elif name not in sqlfile.load(*key).names():
                problems.append(f"{path}:{line}: {key[0].replace('.', '/')}/{key[1]} defines no query {name!r}")
    assert not problems, "\n".join(problems)


def test_every_defined_name_is_used_by_the_engine_or_the_services():
    homes = defined()
    used = {(key, name) for base in (ROOT / "engine", ROOT / "services") for path in sorted(base.rglob("*.py"))
            for key, name, _ in scan(path)[0]}
    dead = sorted(f"{key[0].replace('.', '/')}/{key[1]}: {name}" for name, key in homes.items() if (key, name) not in used)
    assert not dead, f"named SQL that no code runs (delete it): {dead}"


def test_no_code_reads_a_sql_file_around_the_loader():
    stray = [f"{path}:{n}" for path in code_files() if "tests" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"joinpath\([^)]*\.sql", line) and path.name not in {"sqlfile.py", "db.py"}]
    assert not stray, f"read named SQL with common.sqlfile.load: {stray}"


def test_a_section_before_the_first_name_or_a_name_twice_is_refused():
    with pytest.raises(sqlfile.SqlFileError, match="defined twice"):
        sqlfile.parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n", "x.sql")
    with pytest.raises(sqlfile.SqlFileError, match="before the first"):
        sqlfile.parse("SELECT 0;\n-- name: a\nSELECT 1;\n", "x.sql")
    with pytest.raises(KeyError, match="defines no query named 'nope'"):
        sqlfile.load("queue_workflows", "jobs.sql")["nope"]


def statements() -> Iterator[tuple[str, str]]:
    """(label, SQL text) of every named query as the code runs it: each job table, each claim shape."""
    for key in sql_files():
        queries_ = sqlfile.load(*key)
        for name in queries_.names():
            if name in CLAIM_FRAGMENTS:
                continue
            text = queries_[name]
            for table in JOB_TABLES if "{table}" in text else (None,):
                yield f"{key[1]}:{name}" + (f"[{table}]" if table else ""), queries_.sql(name, table).as_string(None)
    for table in JOB_TABLES:
        for order in queries.PRIORITY_ORDER:
            yield f"claim_batch[{table},{order}]", claim_batch_query(table, order).as_string(None)  # type: ignore[arg-type]
            for affinity in (False, True) if table == "workflow_node_jobs" else (False,):  # gpu jobs are DAG nodes
                yield f"claim_job[{table},{order},gpu={affinity}]", queries.claim_query(table, order, affinity).as_string(None)  # type: ignore[arg-type]


def _positional(text: str) -> str:
    """psycopg's `%(x)s` as the server's `$n` (one number per name), `%%` as `%`."""
    numbers: dict[str, int] = {}
    text = PARAM.sub(lambda m: f"${numbers.setdefault(m.group(1), len(numbers) + 1)}", text)
    return text.replace("%%", "%")


def test_every_statement_prepares_against_the_migrated_schema(database_url):
    """The server parses, resolves and types each one (PREPARE runs nothing); COPY and SET, not preparable, run and roll back."""
    failures = []
    with psycopg.connect(database_url) as conn:
        for label, text in statements():
            try:
                with conn.transaction(force_rollback=True):
                    if text.lstrip().upper().startswith("COPY"):
                        with conn.cursor().copy(sql.SQL(text)):
                            pass
                    elif text.lstrip().upper().startswith("SET") and not PARAM.search(text):
                        conn.execute(sql.SQL(text))
                    else:
                        conn.execute(sql.SQL("PREPARE qw_sql_check AS {}").format(sql.SQL(_positional(text))))
                        conn.execute("DEALLOCATE qw_sql_check")  # a prepared statement outlives the rollback
            except psycopg.Error as exc:
                failures.append(f"{label}: {str(exc).splitlines()[0]}")
    assert not failures, "\n".join(failures)
