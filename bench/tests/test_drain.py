"""bench.drain without a broker: the command line per QoS, the publisher's window, the clocks
and the paired ratios and goals."""

from __future__ import annotations

import pytest

from bench import drain
from bench.drainer import pub_inflight


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
