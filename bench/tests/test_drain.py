"""bench.drain and bench.flow_control without a broker: command lines, the publisher's window,
the clocks, the checks after a drain, the paired ratios and goals, and their sections."""

from __future__ import annotations

from typing import Any

import pytest

from bench import drain
from bench import flow_control as fc
from bench.common import BenchError
from bench.drainer import pub_inflight
from bench.render import Charts


def test_each_qos_has_its_backlog() -> None:
    assert drain.parse_args([]).messages == 100_000
    assert drain.parse_args(["--qos", "2"]).messages == 60_000
    assert drain.parse_args(["--qos", "2", "--messages", "65535"]).messages == 65_535


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["--qos", "2", "--messages", "65536"], "packet id"), (["--size", "9"], "must be >= 10"),
     (["--inflight", "-1"], "--inflight"), (["--repeat", "0"], "must be >= 1")],
)  # fmt: skip
def test_bad_values_are_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        drain.parse_args(argv)
    assert said in capsys.readouterr().err


def test_the_publisher_stays_within_the_broker_s_window_at_qos_2() -> None:
    assert pub_inflight(1, 5) == pub_inflight(2, 0) == []  # 0: no broker limit
    assert pub_inflight(2, 5) == ["--inflight", "5"]


def test_qos_2_adds_the_exchanges_complete_clock_and_its_ratio() -> None:
    runs = [
        drain.Drain("ours", 2.0, 0.5, {"drain_seconds": 1.0, "complete_seconds": 1.25}),
        drain.Drain("ours", 4.0, 0.0, {"drain_seconds": 2.0, "complete_seconds": 2.5}),
    ]
    rates = drain.clock_rates(runs, 100)
    assert rates[drain.COMPLETE] == [80.0, 40.0]
    assert rates[drain.ACKNOWLEDGED] == [40.0, 25.0]
    sub = [drain.Drain("mosquitto_sub", 5.0, 0.0, {})] * 2
    both = {"ours": rates, "mosquitto_sub": drain.clock_rates(sub, 100)}
    assert drain.IN_PROCESS not in both["mosquitto_sub"]
    complete = f"ours ({drain.COMPLETE}) / mosquitto_sub ({drain.PROCESS})"
    assert drain.paired_ratios(both, 2)[complete].runs == (4.0, 2.0)
    assert complete not in drain.paired_ratios(both, 1)
    goals = drain.goals(drain.paired_ratios(both, 1))
    assert list(goals) == ["ours/mosquitto_sub"] and goals["ours/mosquitto_sub"]["met"]


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
