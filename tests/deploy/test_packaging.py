"""The distribution ships every engine subpackage (an editable install would hide a missing one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
