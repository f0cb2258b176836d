"""bench.drain without a broker: the command line per QoS, the publisher's window, the clocks
and the paired ratios and goals."""

from __future__ import annotations

import pytest

from bench import drain
from bench.common import RESULTS_DIR
from bench.drainer import publisher_args


def test_each_qos_has_its_backlog_and_results_file() -> None:
    one, two = drain.parse_args([]), drain.parse_args(["--qos", "2"])
    assert (one.messages, one.output) == (100_000, RESULTS_DIR / "drain.json")
    assert (two.messages, two.output) == (60_000, RESULTS_DIR / "drain_qos2.json")
    assert drain.parse_args(["--qos", "2", "--messages", "65535"]).messages == 65_535


@pytest.mark.parametrize(
    "argv", [["--qos", "2", "--messages", "65536"], ["--size", "9"], ["--inflight", "-1"]]
)
def test_bad_values_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        drain.parse_args(argv)
    assert "packet id" in capsys.readouterr().err or "65536" not in argv


def test_the_publisher_stays_within_the_broker_s_window_at_qos_2() -> None:
    assert publisher_args(1, 5) == ["--qos", "1"]
    assert publisher_args(2, 0) == ["--qos", "2"]  # 0: no broker limit
    assert publisher_args(2, 5) == ["--qos", "2", "--inflight", "5"]


def test_qos_2_adds_the_exchanges_complete_clock_and_its_ratio() -> None:
    runs = [
        drain.Drain("ours", 2.0, 1.0, 0.5, 1000.0, 0, {"complete_seconds": 1.25}, 0),
        drain.Drain("ours", 4.0, 2.0, 0.0, 1000.0, 0, {"complete_seconds": 2.5}, 0),
    ]
    rates = drain.clock_rates(runs, 100)
    assert rates[drain.COMPLETE] == [80.0, 40.0]
    assert rates[drain.ACKNOWLEDGED] == [40.0, 25.0]
    sub = [drain.Drain("mosquitto_sub", 5.0, None, 0.0, 1000.0, 0, {})] * 2
    both = {"ours": rates, "mosquitto_sub": drain.clock_rates(sub, 100)}
    assert drain.IN_PROCESS not in both["mosquitto_sub"]
    complete = f"ours ({drain.COMPLETE}) / mosquitto_sub ({drain.PROCESS})"
    assert drain.paired_ratios(both, 2)[complete].runs == (4.0, 2.0)
    assert complete not in drain.paired_ratios(both, 1)
    goals = drain.goals(drain.paired_ratios(both, 1))
    assert list(goals) == ["ours/mosquitto_sub"] and goals["ours/mosquitto_sub"]["met"]
