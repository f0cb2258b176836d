"""bench.report: the committed REPORT.md is what the sections make of the committed results,
a missing or malformed results file says so in its section; every benchmark's command line
parses and every module `make bench` runs exists; chaos soak tallies add up."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bench import report
from bench.chaos_soak import add_up
from bench.chaos_soak import section as soak_section
from bench.common import REPO_ROOT
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
    assert len(charts) == len(list((BENCH / "charts").glob("*.png")))  # every committed one
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


MODULES = sorted(
    p.stem for p in Path(__file__).resolve().parents[1].glob("*.py") if "def main(" in p.read_text()
)


@pytest.mark.parametrize("name", MODULES)
def test_help_parses(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(f"bench.{name}").main(["--help"])
    assert exit_.value.code == 0
    assert f"python -m bench.{name}" in capsys.readouterr().out


def test_the_makefile_runs_existing_benchmarks() -> None:
    named = set(re.findall(r"-m bench\.(\w+)", (REPO_ROOT / "Makefile").read_text()))
    assert {"codec", "ingest", "report", "chaos_soak"} <= named
    assert named <= set(MODULES), named - set(MODULES)


def run(passed: bool, seed: int, **counters: int) -> dict[str, object]:
    return {"passed": passed, "tally": {"seed": seed, "scale": "ci", **counters}}


def test_counters_are_summed_and_the_failed_seeds_shown() -> None:
    entry = add_up(
        [
            run(True, 1, connection_cuts=3, stalls=1, qos1_published=400, qos2_published=400),
            run(False, 9, connection_cuts=3, qos1_published=400, qos2_extra_rows=1),
        ]
    )
    assert (entry["runs"], entry["passed"], entry["failed_seeds"]) == (2, 1, [9])
    assert entry["counters"]["connection_cuts"] == 6 and "seed" not in entry["counters"]
    data = {"tests": {"tests/chaos/test_network_faults.py::test_x": entry}, "loops": 2}
    text = "\n".join(soak_section(data, Charts(None)))
    assert "| `test_x` | 1/2 | 800 / 400 | 6 cuts, 1 stalls | 0 | 1 | 0 |" in text
    assert '"tests/chaos/test_network_faults.py::test_x": [9]' in text
