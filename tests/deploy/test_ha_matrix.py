"""The HA failover test's own checks catch what they look for: a lost unit of work, two executions at once, a malformed matrix row."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import ha_matrix
import pytest
from ha_matrix import Outcome, Trial, executions, tally, write

PROBE_APP = Path(__file__).resolve().parents[1] / "e2e" / "ha_probe"


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("QW_HA_PROBE_LOG", str(tmp_path / "executions.jsonl"))
    monkeypatch.syspath_prepend(str(PROBE_APP))
    import queue_workflows

    queue_workflows.configure(database_url="postgresql://unused@localhost/unused", ingest_queues=frozenset({"fetch"}))
    sys.modules.pop("qw_ha_probe", None)
    import qw_ha_probe

    return qw_ha_probe, tmp_path / "executions.jsonl"


def test_two_executions_at_once_a_rerun_and_a_lost_job_are_each_counted(probe) -> None:
    app, log = probe
    both = [threading.Thread(target=app.probe, args=("r", {"n": 1, "seconds": 0.3})) for _ in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join()
    app.probe("r", {"n": 2, "seconds": 0.05})
    app.probe("r", {"n": 2, "seconds": 0.05})  # after the first ended: a sequential re-run
    app.step(tag="dag6", step="a")
    lost, doubled, reruns = tally(executions(log), ["1", "2", "3", "dag6/a"])
    assert lost == ["3"]
    assert list(doubled) == ["1"] and len(doubled["1"]) == 2
    assert reruns == 1


def test_the_rows_file_has_the_matrix_schema_and_refuses_a_row_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials = [Trial("kill", 0.0, 9.0, 10.5 + i, 10.0 + i, 20.0) for i in range(3)] + [Trial("switchover", 0.0, 2.0, 2.5, 2.4, 1.0)]
    path = write(Outcome(0, 0, 1, trials), tmp_path)
    document = json.loads(path.read_text())
    assert path.name == "ha.json" and document["stage"] == "container" and set(document) == {"date", "machine", "stage", "rows"}
    failover, producers, switchover = document["rows"]
    assert (failover["trials"], failover["recovery_p50_s"], failover["recovery_p99_s"]) == (3, 11.5, 12.5)
    assert (producers["recovery_p50_s"], switchover["trials"], switchover["recovery_p99_s"]) == (11.0, 1, 2.5)
    assert all(r["lost"] == 0 and r["concurrent_double_runs"] == 0 and r["sequential_reruns"] == 1 for r in document["rows"])
    monkeypatch.setattr(ha_matrix, "ROW_KEYS", (*ha_matrix.ROW_KEYS, "p95"))
    with pytest.raises(AssertionError, match="a matrix row has keys"):
        write(Outcome(0, 0, 0, trials), tmp_path / "again")
    assert not (tmp_path / "again").exists()
