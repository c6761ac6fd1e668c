"""The suite keeps to its own database: every statement that reads server-wide views (pg_locks,
pg_stat_activity) or ends backends names `current_database()`, so a run against a shared
Postgres (QW_TEST_DATABASE_URL) never sees, waits on or kills another application's sessions."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SERVER_WIDE = re.compile(r"\b(pg_locks|pg_stat_activity|pg_terminate_backend|pg_cancel_backend)\b")  # a match must name current_database()
OWN_DATABASE = "current_database()"


def _text(node: ast.AST, constants: dict[str, str]) -> str | None:
    """A string literal's text, an f-string's with its module-level constants filled in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                parts.append(constants.get(value.value.id, "{}"))
            else:
                parts.append("{}")
        return "".join(parts)
    return None


def unscoped_statements(path: Path, root: Path = TESTS) -> list[str]:
    """`file:line: statement` for each SQL string in `path` that reads or acts server-wide."""
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    inside_fstrings = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if id(node) in inside_fstrings:
            continue
        text = _text(node, constants)
        if text and SERVER_WIDE.search(text) and OWN_DATABASE not in text:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {' '.join(text.split())[:160]}")
    return found


def test_every_lock_or_backend_query_of_the_suite_is_scoped_to_its_own_database():
    # tests/e2e talks to the stack's own Postgres container, a server no one else uses.
    files = [p for p in TESTS.rglob("*.py") if "e2e" not in p.relative_to(TESTS).parts and p.name != Path(__file__).name]
    assert len(files) > 50
    offenders = [line for path in sorted(files) for line in unscoped_statements(path)]
    assert not offenders, "statements that see or end other databases' sessions:\n" + "\n".join(offenders)


def test_the_check_sees_an_unscoped_statement_and_accepts_a_scoped_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        'THIS_DB = "(SELECT oid FROM pg_database WHERE datname = current_database())"\n'
        'A = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"\n'
        'B = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "\n     "WHERE pid = %s AND datname = current_database()")\n'
        'C = f"SELECT pid FROM pg_locks WHERE database = {THIS_DB}"\n'
        'D = f"SELECT pid FROM pg_locks WHERE database = {other}"\n'
    )
    found = unscoped_statements(sample, root=tmp_path)
    assert [line.split(":")[1] for line in found] == ["2", "6"], found
