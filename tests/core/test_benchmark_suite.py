"""Every benchmark is smoke-run in CI so none rots: `run_all.py` runs them all, each honours `--quick`,
and `.ci/run` runs `run_all.py --quick` with the peers installed."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _is_script(path: Path) -> bool:
    """A benchmark is a file of benchmarks/ with an `if __name__ == "__main__":` block; the rest are helpers."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name):
            if node.test.left.id == "__name__":
                return True
    return False


SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "run_all" and _is_script(p))


def test_run_all_runs_every_benchmark(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("run_all", None)
    import run_all

    assert sorted(run_all.SCRIPTS) == SCRIPTS, f"left out of run_all.py: {sorted(set(SCRIPTS) - set(run_all.SCRIPTS))}"


def test_every_benchmark_honours_quick():
    ignoring = [name for name in SCRIPTS if "args.quick" not in (BENCH / f"{name}.py").read_text()]
    assert not ignoring, f"accept --quick (common.base_parser) but run full size: {ignoring}"


def test_ci_smoke_runs_the_benchmarks_with_the_peers_after_the_import_rules():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    smoke = next(i for i, line in enumerate(lines) if "python benchmarks/run_all.py --quick" in line)
    assert "pip install -e '.[bench]'" in lines[smoke], "the peers (pgqueuer, procrastinate) must be installed for the smoke run"
    assert lines.index("lint-imports") < smoke < lines.index("bash .ci/containers.sh")
