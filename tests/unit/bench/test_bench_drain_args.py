"""bench.drain's command line: backlog size and results file per QoS, the QoS 2 backlog limit,
the publisher's arguments and the clocks each QoS reports (no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import drain
from bench.common import RESULTS_DIR


def test_qos_1_keeps_its_defaults() -> None:
    args = drain.parse_args([])
    assert (args.qos, args.messages, args.output) == (1, 100_000, RESULTS_DIR / "drain.json")
    assert drain.parse_args(["--messages", "250000"]).messages == 250_000


def test_qos_2_defaults_to_60_000_messages_and_its_own_results_file() -> None:
    args = drain.parse_args(["--qos", "2"])
    assert (args.qos, args.messages) == (2, 60_000)
    assert args.output == RESULTS_DIR / "drain_qos2.json"
    assert drain.results_path(2) != drain.results_path(1)


def test_an_explicit_output_wins(tmp_path: Path) -> None:
    for qos in ("1", "2"):
        target = tmp_path / f"q{qos}.json"
        assert drain.parse_args(["--qos", qos, "--output", str(target)]).output == target


def test_qos_2_takes_up_to_one_packet_id_per_message() -> None:
    limit = drain.QOS2_MAX_MESSAGES
    assert limit == 65_535
    assert drain.parse_args(["--qos", "2", "--messages", str(limit)]).messages == limit


def test_a_larger_qos_2_backlog_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        drain.parse_args(["--qos", "2", "--messages", "65536"])
    assert exc.value.code == 2
    error = capsys.readouterr().err
    assert "at most 65,535" in error
    assert "packet id" in error and "Mosquitto 2.0.11" in error


@pytest.mark.parametrize(
    "argv",
    [["--qos", "3"], ["--messages", "0"], ["--qos", "2", "--size", "9"], ["--inflight", "-1"]],
)
def test_bad_values_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        drain.parse_args(argv)


def test_the_publisher_stays_within_the_broker_s_inflight_limit_at_qos_2() -> None:
    assert drain.publisher_command(1, 20) == ["--qos", "1"]
    assert drain.publisher_command(1, 5) == ["--qos", "1"]
    assert drain.publisher_command(2, 20) == ["--qos", "2"]
    assert drain.publisher_command(2, 0) == ["--qos", "2"]  # 0: no broker limit
    assert drain.publisher_command(2, 5) == ["--qos", "2", "--inflight", "5"]


def test_qos_2_adds_the_exchanges_complete_clock() -> None:
    assert drain.metrics_for(1) == drain.METRICS
    assert drain.COMPLETE not in drain.clocks_for(1)
    assert set(drain.clocks_for(2)) == set(drain.metrics_for(2))
    runs = [
        drain.Drain("ours", 2.0, 1.0, 0.5, 1000.0, 0, {"complete_seconds": 1.25}, 0),
        drain.Drain("ours", 4.0, 2.0, 0.0, 1000.0, 0, {"complete_seconds": 2.5}, 0),
    ]
    rates = drain._rates(runs, 100)
    assert rates[drain.COMPLETE] == [80.0, 40.0]
    assert rates[drain.IN_PROCESS] == [100.0, 50.0]
    assert rates[drain.ACKNOWLEDGED] == [40.0, 25.0]
    qos1 = [drain.Drain("ours", 2.0, 1.0, 0.5, 1000.0, 0, {})]
    assert drain.COMPLETE not in drain._rates(qos1, 100)


def test_qos_2_ratios_compare_the_completed_drain_with_mosquitto_sub() -> None:
    rates = {
        "ours": {drain.IN_PROCESS: [100.0], drain.COMPLETE: [80.0], drain.PROCESS: [50.0]},
        "mosquitto_sub": {drain.PROCESS: [40.0]},
    }
    ratios = drain._ratios(rates, drain.metrics_for(2))
    complete = f"ours ({drain.COMPLETE}) / mosquitto_sub ({drain.PROCESS})"
    assert ratios[complete].median == pytest.approx(2.0)
    assert complete not in drain._ratios(rates, drain.metrics_for(1))
