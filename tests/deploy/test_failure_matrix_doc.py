"""docs/failure-matrix.md is generated from the committed failure-matrix results: the page on disk must be exactly what the renderer makes of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


@pytest.fixture
def renderer(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import failure_matrix_doc

    return failure_matrix_doc


def test_the_page_is_what_the_committed_results_render_to(renderer):
    on_disk = (ROOT / "docs" / "failure-matrix.md").read_text()
    assert on_disk == renderer.render_committed(), (
        "docs/failure-matrix.md differs from its results files: rewrite it with `python benchmarks/failures.py --write-doc`"
        " (never by hand)")


def test_the_committed_local_results_cover_every_fault_with_full_trials(renderer):
    local = renderer.load_results(renderer.newest(renderer.LOCAL))
    faults = {row["fault"] for row in local["rows"]}
    from failure_faults import FAULTS

    assert faults == {f.name for f in FAULTS}, f"faults without a row: {sorted({f.name for f in FAULTS} - faults)}"
    for row in local["rows"]:
        assert row["stage"] == "soak" and row["trials"] >= 5, row


def test_a_row_edited_by_hand_no_longer_matches_the_page(renderer, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(renderer.RESULTS, results)
    path = renderer.newest(renderer.LOCAL, results)
    doc = json.loads(path.read_text())
    doc["rows"][0]["recovery_p50_s"] = 0.001  # a number polished by hand in the results...
    path.write_text(json.dumps(doc))
    assert renderer.render_committed(results) != (ROOT / "docs" / "failure-matrix.md").read_text()
    doc["rows"][0]["hand_note"] = "x"  # ...or a row outside the schema
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="hand_note"):
        renderer.render_committed(results)


def test_a_page_edited_by_hand_is_caught(renderer, tmp_path):
    edited = (ROOT / "docs" / "failure-matrix.md").read_text().replace("| 0 | 0 |", "| 0 | 1 |", 1)
    assert edited != (ROOT / "docs" / "failure-matrix.md").read_text(), "the table has no row to edit"
    assert edited != renderer.render_committed()
