"""The benchmark report: every figure in docs/benchmarks.md comes from a results file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import report  # noqa: E402
import results  # noqa: E402


def test_results_become_tables_ratios_and_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    run = results.Results("transfers", "Stage-in (`bench_transfers.py`)\nWhat it measures.")
    run.scenario(
        "large",
        "One big object",
        [{"contender": "s5cmd", "gbps": 2.0}, {"contender": "dask_staging", "gbps": 2.5}],
        value="gbps",
        unit="GB/s",
        baseline="s5cmd",
        target="≥ 1.0\u00d7 s5cmd",
    )
    saved = json.loads(run.save().read_text())
    assert saved["machine"]["cores"] and saved["command"].startswith(".venv/bin/python")
    assert [r["ratio"] for r in saved["scenarios"][0]["rows"]] == [1.0, 1.25]
    docs = tmp_path / "docs"
    assert report.main(["--results", str(tmp_path / "results"), "--docs", str(docs)]) == 0
    page = (docs / "benchmarks.md").read_text()
    assert "## Stage-in (`bench_transfers.py`)" in page
    assert "| dask_staging | 2.50 | **1.25\u00d7** |" in page
    assert f"- Command: `{saved['command']}`" in page and "Target: ≥ 1.0\u00d7 s5cmd" in page
    assert (docs / "benchmarks" / "transfers-large.png").read_bytes()[:4] == b"\x89PNG"


def test_the_published_page_matches_the_results_files(tmp_path):
    """docs/benchmarks.md is exactly what report.py makes of benchmarks/results/."""
    if not any((BENCH / "results").glob("*.json")):
        return
    report.main(["--docs", str(tmp_path)])
    published = (BENCH.parent / "docs" / "benchmarks.md").read_text()
    assert (tmp_path / "benchmarks.md").read_text() == published
