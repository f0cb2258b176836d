"""bench.flow_control's helpers without a broker: the command line, the checks after a drain,
the paired ratios and goals, the results file's shape and its section in the report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench import flow_control as fc
from bench import report
from bench.common import BenchError

N = 1000
MACHINE = {
    "cpu_model": "Test CPU", "cores": 2, "python": "CPython 3.11", "mosquitto": "2.0.11",
    "paho_mqtt": "2.2.0", "date": "2026-01-01T00:00:00+00:00",
}  # fmt: skip


def run(arm: str, seconds: float, *, peak: int = 20, rtt: float | None = None, **details: object):
    base = {"distinct": N, "out_of_range": 0, "wal_records": N, "connect_seconds": 0.01,
            "appends": 50, "duplicates": 0, "connections": 1}  # fmt: skip
    return fc.Run(arm, seconds, seconds + 0.2, 0.001, 30_000.0, peak, 0, rtt, {**base, **details})


def fake_runs() -> dict[str, list[fc.Run]]:
    """Two repetitions: (a) 10,000 and 5,000 msg/s, (b) 500 and 1,000, (c) 40,000 and 20,000,
    (d) 50,000 and 50,000."""
    return {
        "a": [run("a", N / 10_000), run("a", N / 5_000)],
        "b": [run("b", N / 500, rtt=0.021), run("b", N / 1_000, rtt=0.023)],
        "c": [run("c", N / 40_000, peak=N, rtt=0.022), run("c", N / 20_000, peak=N, rtt=0.02)],
        "d": [run("d", N / 50_000, peak=N), run("d", N / 50_000, peak=N)],
    }


def results(argv: list[str] | None = None) -> dict:
    args = fc.parse_args(["--messages", str(N), "--repeat", "2", *(argv or [])])
    return fc.results_data(args, MACHINE, fake_runs())


def test_the_defaults_are_the_issue_s_setting() -> None:
    args = fc.parse_args([])
    assert (args.messages, args.repeat, args.size) == (20_000, 3, 100)
    assert (args.delay_ms, args.window, args.receive_maximum) == (10.0, 20, 65_535)
    assert args.arms == ["a", "b", "c", "d"]
    assert args.drainer in fc.DRAINERS
    assert args.output == fc.RESULTS_FILE == fc.RESULTS_DIR / "flow_control.json"


@pytest.mark.parametrize("takes", [True, False])
def test_auto_drains_with_the_receiver_once_it_takes_the_mqtt_5_settings(
    monkeypatch: pytest.MonkeyPatch, takes: bool
) -> None:
    monkeypatch.setattr(fc, "receiver_takes_mqtt5", lambda: takes)
    assert fc.parse_args([]).drainer == ("receiver" if takes else "client-wal")
    for drainer in fc.DRAINERS:
        assert fc.parse_args(["--drainer", drainer]).drainer == drainer


def test_the_probe_of_the_source_options_answers() -> None:
    assert fc.receiver_takes_mqtt5() in (True, False)


def test_arms_keep_their_order_whatever_the_command_line_s(tmp_path: Path) -> None:
    args = fc.parse_args(["--arms", "d", "b", "--output", str(tmp_path / "x.json")])
    assert args.arms == ["b", "d"]
    assert args.output == tmp_path / "x.json"


@pytest.mark.parametrize(
    "argv",
    [
        ["--messages", "0"], ["--repeat", "0"], ["--size", "9"], ["--window", "0"],
        ["--window", "65536"], ["--receive-maximum", "0"], ["--receive-maximum", "65536"],
        ["--delay-ms", "0"], ["--arms", "e"], ["--drainer", "paho"],
    ],
)  # fmt: skip
def test_bad_values_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        fc.parse_args(argv)


def test_ratios_are_paired_by_repetition() -> None:
    rates = {key: fc.arm_rates(runs, N) for key, runs in fake_runs().items()}
    assert rates["c"] == pytest.approx([40_000, 20_000])
    ratios = fc.compute_ratios(rates)
    assert ratios["(c)/(d)"].runs == pytest.approx((0.8, 0.4))
    assert ratios["(c)/(a)"].runs == pytest.approx((4.0, 4.0))
    assert ratios["(b)/(a)"].runs == pytest.approx((0.05, 0.2))
    assert ratios["(c)/(b)"].runs == pytest.approx((80.0, 20.0))
    assert ratios["(d)/(a)"].runs == pytest.approx((5.0, 10.0))
    assert ratios["(c)/(d)"].median == pytest.approx(0.6)


def test_a_ratio_needs_both_arms() -> None:
    rates = {"a": [1.0], "c": [2.0]}
    assert set(fc.compute_ratios(rates)) == {"(c)/(a)"}


def test_goals_are_mqtt_5_over_the_long_round_trip_against_our_loopback_drains() -> None:
    rates = {key: fc.arm_rates(runs, N) for key, runs in fake_runs().items()}
    goals = fc.goals(fc.compute_ratios(rates))
    assert set(goals) == {"(c)/(d)", "(c)/(a)"}
    assert goals["(c)/(d)"] == {"ratio": "(c)/(d)", "target": 0.5, "measured": 0.6, "met": True}
    assert goals["(c)/(a)"]["met"]
    slow = fc.compute_ratios({"c": [10.0], "d": [100.0]})
    assert fc.goals(slow)["(c)/(d)"]["met"] is False


def test_the_3_1_1_cap_is_the_window_per_round_trip() -> None:
    assert fc.cap(20, 0.020) == pytest.approx(1000.0)
    assert fc.cap(32, 0.020) == pytest.approx(1600.0)


def test_a_run_is_checked_against_the_backlog_and_the_window() -> None:
    fc.check_run(run("a", 1.0), N, 20, 65_535)
    fc.check_run(run("c", 1.0, peak=N), N, 20, 65_535)
    with pytest.raises(BenchError, match="more than the window of 20"):
        fc.check_run(run("b", 1.0, peak=21), N, 20, 65_535)
    with pytest.raises(BenchError, match="more than the window of 100"):
        fc.check_run(run("d", 1.0, peak=101), N, 20, 100)
    with pytest.raises(BenchError, match="distinct"):
        fc.check_run(run("a", 1.0, distinct=N - 1), N, 20, 65_535)
    with pytest.raises(BenchError, match="distinct"):
        fc.check_run(run("a", 1.0, wal_records=N + 1), N, 20, 65_535)
    left = run("a", 1.0)
    left.left_queued = 3
    with pytest.raises(BenchError, match="left 3"):
        fc.check_run(left, N, 20, 65_535)


def test_the_results_file_shape() -> None:
    data = results()
    assert data["benchmark"] == "flow_control"
    assert json.loads(json.dumps(data)) == data  # plain JSON
    params = data["parameters"]
    assert (params["messages"], params["rtt_ms"], params["window_v311"]) == (N, 20.0, 20)
    assert params["receive_maximum"] == 65_535 and params["drainer"] in fc.DRAINERS
    assert "-inflight-v311 20" in params["broker"]
    assert list(data["arms"]) == ["a", "b", "c", "d"]
    a, c = data["arms"]["a"], data["arms"]["c"]
    assert a["title"] == "(a) MQTT 3.1.1, loopback"
    assert c["title"] == "(c) MQTT 5, 20 ms RTT (proxy)"
    assert (a["window"], c["window"]) == (20, 65_535)
    assert c["rates"]["median"] == pytest.approx(30_000.0)
    assert c["rates_after_connack"]["median"] > c["rates"]["median"]
    assert c["broker_peak_in_flight"] == N and a["broker_peak_in_flight"] == 20
    assert a["messages_per_append_median"] == pytest.approx(N / 50)
    assert [r["rate"] for r in c["runs"]] == [40_000.0, 20_000.0]
    assert "rtt_ms" in c["runs"][0] and "rtt_ms" not in a["runs"][0]
    assert set(data["ratios"]) == set(data["ratio_meanings"]) == {
        "(c)/(d)", "(c)/(a)", "(b)/(a)", "(c)/(b)", "(d)/(a)",
    }  # fmt: skip
    assert data["goals"]["(c)/(d)"]["met"]
    assert data["v311_cap"] == {"nominal": 1000.0, "measured_rtt_ms": 21.5,
                                "at_measured_rtt": pytest.approx(930.2, abs=0.1)}  # fmt: skip
    assert set(data["clocks"]) == {fc.CLOCK, fc.CLOCK_AFTER_CONNACK}


def test_arms_left_out_leave_their_ratios_and_goals_out() -> None:
    args = fc.parse_args(["--messages", str(N), "--arms", "a", "b"])
    runs = {key: value for key, value in fake_runs().items() if key in ("a", "b")}
    data = fc.results_data(args, MACHINE, runs)
    assert list(data["arms"]) == ["a", "b"]
    assert set(data["ratios"]) == {"(b)/(a)"}
    assert data["goals"] == {}


def test_the_report_renders_the_section(tmp_path: Path) -> None:
    charts = report.Charts(tmp_path / "charts", tmp_path)
    text = report.build_report({"flow_control": results()}, charts)
    section = text.split("## Flow control over a long round trip", 1)[1].split("\n## ", 1)[0]
    assert "`python -m bench.flow_control` → `bench/results/flow_control.json`" in section
    assert "| (c) MQTT 5, 20 ms RTT (proxy) | 30,000 | 20,000 | 40,000 |" in section
    assert "| (b)/(a) | 0.12x | 0.05x | 0.20x | 3.1.1 over the long round trip" in section
    assert "1,000 msg/s at 20 ms, 930 msg/s at the 21.50 ms measured" in section
    assert "| (c)/(d) | 0.5 | 0.6 | met |" in section
    assert "unexpected shape" not in section


def test_the_report_without_results_or_of_another_shape(tmp_path: Path) -> None:
    charts = report.Charts(tmp_path / "charts", tmp_path)
    missing = report.build_report({}, charts)
    assert "## Flow control over a long round trip" in missing
    odd = report.build_report({"flow_control": {"machine": MACHINE}}, charts)
    section = odd.split("## Flow control over a long round trip", 1)[1].split("\n## ", 1)[0]
    assert "unexpected shape" in section


def test_the_worker_command_line_is_its_own() -> None:
    # `worker` goes to the worker's parser, not the benchmark's.
    with pytest.raises(SystemExit) as exc:
        fc.run_worker(["paho", "tcp://127.0.0.1:1", "id", "10"])
    assert exc.value.code == 2
    assert isinstance(fc.build_parser(), argparse.ArgumentParser)


@pytest.mark.parametrize("appends", [50, None])
def test_the_printed_summary(capsys: pytest.CaptureFixture[str], appends: int | None) -> None:
    data = results()
    for item in data["arms"].values():
        item["messages_per_append_median"] = appends and N / appends
    fc.print_summary(data)
    out = capsys.readouterr().out
    assert "(c) MQTT 5, 20 ms RTT (proxy)" in out
    assert ("msgs/append" in out) == (appends is not None)
    assert "goal (c)/(d) >= 0.5x: 0.60x -> met" in out
    assert "1,000 msg/s at 20 ms, 930 msg/s at the measured 21.50 ms" in out
