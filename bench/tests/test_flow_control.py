"""bench.flow_control without a broker: the checks after a drain, the paired ratios and goals,
and the results file the report renders."""

from __future__ import annotations

from typing import Any

import pytest

from bench import flow_control as fc
from bench.common import BenchError
from bench.render import Charts

N = 1000


def run(arm: str, seconds: float, peak: int = 20, rtt: float | None = None, **more: Any) -> fc.Run:
    details = {"distinct": N, "out_of_range": 0, "wal_records": N, "connect_seconds": 0.01,
               "drain_seconds": seconds, **more}  # fmt: skip
    return fc.Run(arm, seconds + 0.2, 0.001, peak, 0, rtt, details)


def test_a_run_is_checked_against_the_backlog_and_the_window() -> None:
    fc.check_run(run("c", 1.0, peak=N), N, 20, 65_535)
    with pytest.raises(BenchError, match="more than the window of 20"):
        fc.check_run(run("b", 1.0, peak=21), N, 20, 65_535)
    with pytest.raises(BenchError, match="distinct"):
        fc.check_run(run("a", 1.0, wal_records=N + 1), N, 20, 65_535)


def test_the_results_pair_the_arms_by_repetition() -> None:
    args = fc.parse_args(["--messages", str(N), "--repeat", "2"])
    assert args.arms == ["a", "b", "c", "d"]
    runs = {
        "a": [run("a", N / 10_000), run("a", N / 5_000)],
        "b": [run("b", N / 500, rtt=0.021), run("b", N / 1_000, rtt=0.023)],
        "c": [run("c", N / 40_000, N, 0.022), run("c", N / 20_000, N, 0.02)],
        "d": [run("d", N / 50_000, N), run("d", N / 50_000, N)],
    }
    data = fc.results_data(args, {}, runs)
    assert data["arms"]["c"]["title"] == "(c) MQTT 5, 20 ms RTT (proxy)"
    assert data["ratios"]["(c)/(d)"]["runs"] == [0.8, 0.4]
    assert data["ratios"]["(b)/(a)"]["runs"] == [0.05, 0.2]
    assert data["goals"]["(c)/(d)"] == {"ratio": "(c)/(d)", "target": 0.5, "measured": 0.6,
                                        "met": True}  # fmt: skip
    assert data["v311_cap"] == {"nominal": 1000.0, "measured_rtt_ms": 21.5,
                                "at_measured_rtt": 930.2}  # fmt: skip
    text = "\n".join(fc.section(data, Charts(None)))
    assert "| (c) MQTT 5, 20 ms RTT (proxy) | 30,000 | 20,000 | 40,000 |" in text
    assert "1,000 msg/s at 20 ms, 930 msg/s at the 21.50 ms measured" in text
    only = fc.results_data(args, {}, {k: runs[k] for k in "ab"})
    assert set(only["ratios"]) == {"(b)/(a)"} and only["goals"] == {}
