"""bench.report: the committed REPORT.md is what the sections make of the committed results;
a missing or malformed results file says so in its section."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import report
from bench.render import Charts

BENCH = Path(report.__file__).resolve().parent


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_committed_report_is_rendered_from_the_committed_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    output = tmp_path / "REPORT.md"
    assert report.main(["--results", str(BENCH / "results"), "--output", str(output)]) == 0
    text = output.read_text()
    assert text == (BENCH / "REPORT.md").read_text()
    charts = [line for line in text.splitlines() if line.startswith("![")]
    assert len(charts) == 4
    for line in charts:
        png = tmp_path / line[line.index("](") + 2 : -1]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", line


def test_missing_unreadable_and_malformed_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "drain.json").write_text('{"machine": {"cores": 2}, "peers": "not a dict"}')
    (results / "codec.json").write_text("{not json")
    (results / "ingest_s3.json").write_text('{"peers": {}, "ratios": "odd"}')
    charts = Charts(tmp_path / "charts", tmp_path)
    text = report.build_report(report.load_results(results), charts)
    assert "| `drain.json` |" in _section(text, "Machine")
    assert "unexpected shape (AttributeError" in _section(text, "Drain")
    assert "*The results file could not be read:" in _section(text, "Codec")
    for title in ("Latency", "Scale of cost", "Chaos", "Shared subscription"):
        assert "*Not run: no results file.*" in _section(text, title)
    s3 = _section(text, "WAL on object storage")
    assert "unexpected shape" in s3.split("### The receiver alone")[0]
    assert "*The results have an unexpected shape" in s3.split("### What limits the S3 peer")[1]
    assert not (tmp_path / "charts").exists()
