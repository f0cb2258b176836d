"""bench.chaos_soak adds up the tallies of looped chaos runs, and renders them."""

from __future__ import annotations

from bench.chaos_soak import add_up, section
from bench.render import Charts


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
    text = "\n".join(section(data, Charts(None)))
    assert "| `test_x` | 1/2 | 800 / 400 | 6 cuts, 1 stalls | 0 | 1 | 0 |" in text
    assert '"tests/chaos/test_network_faults.py::test_x": [9]' in text
