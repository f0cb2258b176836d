"""bench.sink without Spark or a broker: its payloads, and its results rendered by
bench.report's section."""

from __future__ import annotations

from pathlib import Path

from bench import report
from bench import sink as bench
from bench.common import Stats, paired_ratio


def test_payloads_are_numbered_and_sized() -> None:
    assert bench.payload(7, 12) == b"0000000007xx"
    assert bench.payload(123, 4) == b"0000"
    assert len({bench.payload(i, 100) for i in range(1000)}) == 1000


def test_the_report_section_renders_rates_and_ratios(tmp_path: Path) -> None:
    rates = {"spark": [8000.0, 9000.0], "task": [30000.0, 31000.0], "paho": [10000.0, 9000.0]}
    result = {
        "rates": {peer: Stats.of(values).as_dict(1) for peer, values in rates.items()},
        "spark/paho": paired_ratio(rates["spark"], rates["paho"]).as_dict(),
        "task/paho": paired_ratio(rates["task"], rates["paho"]).as_dict(),
    }
    data = {
        "params": {"messages": 20000, "size": 100, "repeat": 2, "partitions": 2},
        "qos": {"1": result},
    }
    text = "\n".join(report.section_sink(data, report.Charts(tmp_path, tmp_path)))
    assert "20,000 messages of 100 bytes" in text
    assert "| 1 | 8,500 | 30,500 | 9,500 | 0.9" in text
