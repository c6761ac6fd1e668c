"""The distribution ships every engine subpackage (an editable install would hide a missing one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_in_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    dirs = project["tool"]["setuptools"]["package-dir"]
    found = set()
    for top, rel in dirs.items():
        for init in (ROOT / rel).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                parts = init.parent.relative_to(ROOT / rel).parts
                found.add(".".join((top, *parts)))
    assert found <= listed, f"not shipped in the wheel: {sorted(found - listed)}"


def test_every_sql_file_is_package_data():
    """Named SQL and migrations are read at run time, so a .sql no package-data glob matches breaks the wheel only."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dirs = project["tool"]["setuptools"]["package-dir"]
    data = project["tool"]["setuptools"]["package-data"]
    unshipped = []
    for top, rel in dirs.items():
        for sql_file in (ROOT / rel).rglob("*.sql"):
            package_dir = sql_file.parent
            package = ".".join((top, *package_dir.relative_to(ROOT / rel).parts))
            if not any(sql_file.relative_to(package_dir).match(glob) for glob in data.get(package, [])):
                unshipped.append(str(sql_file.relative_to(ROOT)))
    assert unshipped == [], f"not in the wheel (add the package's '*.sql' to [tool.setuptools.package-data]): {unshipped}"
