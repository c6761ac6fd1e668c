"""The failure matrix in quick mode (benchmarks/failures.py --quick: every fault, 2 trials, under the steady load): nothing lost, nothing run twice at once, and a row for every fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.soak, pytest.mark.multiprocess, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def test_every_fault_of_the_quick_matrix_loses_nothing_and_runs_nothing_twice_at_once(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    from failure_faults import FAULTS

    out = tmp_path / "failures.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QW_")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(BENCH / "failures.py"), "--quick", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=540)
    took = time.monotonic() - started
    print(done.stdout[-6000:])
    print(f"quick failure matrix: {took:.0f}s")
    assert out.exists(), f"no results (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    rows = {row["fault"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {f.name for f in FAULTS}, f"faults without a row: {sorted({f.name for f in FAULTS} - set(rows))}"
    for name, row in rows.items():
        assert row["lost"] == 0, f"{name}: {row['lost']} jobs or runs lost: {row}"
        assert row["concurrent_double_runs"] == 0, f"{name}: {row['concurrent_double_runs']} concurrent double runs: {row}"
        assert not row["operator_sees"].startswith("BROKEN"), f"{name}: {row['operator_sees']}"
        assert row["trials"] == 2 or row["operator_sees"].startswith("skipped: "), row
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
