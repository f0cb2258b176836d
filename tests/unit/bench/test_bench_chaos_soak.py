"""bench.chaos_soak adds up the tallies of looped chaos runs, and the report renders them:
runs passed, messages per QoS, faults, lost and extra rows, and the seeds of failed runs."""

from __future__ import annotations

from pathlib import Path

from bench.chaos_soak import add_up
from bench.report import Charts, section_chaos_soak


def run(passed: bool, seed: int, **counters: int) -> dict[str, object]:
    return {"passed": passed, "tally": {"seed": seed, "scale": "ci", **counters}}


def test_counters_are_summed_and_failed_seeds_kept() -> None:
    total = add_up(
        [
            run(True, 1, connection_cuts=3, qos1_published=10, qos2_published=10),
            run(False, 7, connection_cuts=2, qos1_published=12, qos1_extra_rows=1),
        ]
    )
    assert total["runs"] == 2 and total["passed"] == 1
    assert total["failed_seeds"] == [7]
    assert total["counters"] == {
        "connection_cuts": 5,
        "qos1_published": 22,
        "qos2_published": 10,
        "qos1_extra_rows": 1,
    }


def test_the_report_shows_each_test_with_its_faults_and_failures(tmp_path: Path) -> None:
    entry = add_up(
        [
            run(True, 1, connection_cuts=3, stalls=1, qos1_published=400, qos2_published=400),
            run(False, 9, connection_cuts=3, qos1_published=400, qos2_extra_rows=1),
        ]
    )
    data = {"tests": {"tests/chaos/test_network_faults.py::test_x": entry}, "loops": 2}
    text = "\n".join(section_chaos_soak(data, Charts(tmp_path, tmp_path)))
    assert "| `test_x` | 1/2 | 800 / 400 | 6 cuts, 1 stalls | 0 | 1 | 0 |" in text
    assert "2 loop(s) side by side" in text
    assert '"tests/chaos/test_network_faults.py::test_x": [9]' in text


def test_the_micro_costs_render_beside_their_alternatives(tmp_path: Path) -> None:
    from bench.report import section_micro

    def stats(median: float) -> dict[str, float]:
        return {"median": median, "min": median, "max": median}

    data = {
        "enum member": {"through the class": stats(30.5), "module name": stats(12.0)},
        "record build": {
            "NewRecord (NamedTuple)": stats(250.0),
            "plain tuple": stats(50.0),
            "ratio": 5.0,
        },
        "crc32": {"GB/s": stats(1.7)},
    }
    text = "\n".join(section_micro(data, Charts(tmp_path, tmp_path)))
    assert "30.5 ns / 12.0 ns" in text and "(5.0x)" in text and "1.7 GB/s" in text
    assert "PySpark" not in text  # measured only with Spark
