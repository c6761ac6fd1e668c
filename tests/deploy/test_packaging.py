"""The distribution ships every engine subpackage and data file (an editable install would hide a missing one)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS = PROJECT["tool"]["setuptools"]["package-dir"]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(PROJECT["tool"]["setuptools"]["packages"])
    found = set()
    for top, rel in PACKAGE_DIRS.items():
        for init in (ROOT / rel).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                parts = init.parent.relative_to(ROOT / rel).parts
                found.add(".".join((top, *parts)))
    assert found <= listed, f"not shipped in the wheel: {sorted(found - listed)}"


def test_the_build_ships_every_data_file_and_the_py_typed_markers(tmp_path):
    # build_py lays out exactly the files a wheel packs, without the `wheel` package or the network.
    for name in ("pyproject.toml", "README.md", "LICENSE", *{rel.split("/")[0] for rel in PACKAGE_DIRS.values()}):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, tmp_path / name)
    done = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py", "--build-lib", "out"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    built = {str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert {"queue_workflows/py.typed", "qw_services/py.typed"} <= built, "PEP 561: mypy ignores an installed package without py.typed"
    source = set()
    for top, rel in PACKAGE_DIRS.items():
        for path in (ROOT / rel).rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts:
                source.add(f"{top}/{path.relative_to(ROOT / rel)}")
    assert source <= built, f"data files the wheel would leave out: {sorted(source - built)}"


def test_ci_installs_the_torch_extra_before_the_readme_test_command():
    # Without it the PyTorch example's test (tests/gpu/test_gpu_torch_model.py) would skip in CI.
    assert PROJECT["project"]["optional-dependencies"]["torch"], "the torch extra"
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    readme = lines.index("pip install -e '.[test]' && pytest")  # the README's command, verbatim
    assert "pip install -e '.[torch]'" in lines[:readme]
