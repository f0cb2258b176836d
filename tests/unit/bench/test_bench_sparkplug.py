"""bench.sparkplug without Spark or a broker: its backlog decodes to M named metrics per NDATA,
alias-only on the wire, seq wrapping; the decoder-alone figures; the results document rendered
by bench.report's section; the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import report
from bench import sparkplug as bench
from bench.common import RESULTS_DIR
from bench.cpu_sampler import COMPONENTS
from bench.ingest import BatchProgress, Landing, QueryRun
from connector.sparkplug.messages import decode_messages
from connector.sparkplug.state import SparkplugState
from tests.sparkplug_payloads import pb


def _decoded(messages: int, metrics: int, nodes: int = 1) -> tuple[list, dict[str, list]]:
    backlog = bench.backlog_messages(messages, metrics, nodes)
    rows = decode_messages(bench.stored(backlog), SparkplugState())
    return backlog, rows.columns


def test_the_backlog_decodes_to_every_metric_named_and_typed() -> None:
    backlog, columns = _decoded(300, 7)
    assert len(backlog) == 301
    assert len(columns["offset"]) == bench.expected_rows(300, 7) == 8 + 300 * 7
    assert all(reason is None for reason in columns["reason"])
    assert all(name is not None for name in columns["metric_name"])
    assert columns["metric_name"][0] == "bdSeq"  # the birth's own metric, then the M defined
    data = [i for i, kind in enumerate(columns["message_type"]) if kind == "NDATA"]
    assert len(data) == 300 * 7
    first = data[:7]
    assert [columns["metric_name"][i] for i in first] == [bench.metric_name(k) for k in range(7)]
    assert [columns["datatype"][i] for i in first] == [
        "Int32", "Int64", "Double", "Boolean", "String", "Int32", "Int64",
    ]  # fmt: skip
    assert [columns["alias"][i] for i in first] == list(range(1, 8))
    int32 = [columns["long_value"][i] for i in data if columns["datatype"][i] == "Int32"]
    assert min(int32) < 0 < max(int32)  # sign-extended on the wire, signed in the row
    sample = 123  # the 123rd NDATA of the node
    row = data[(sample - 1) * 7 + 2]  # its Double
    assert columns["double_value"][row] == bench.metric_value(2, sample)
    row = data[(sample - 1) * 7 + 4]  # its String
    assert columns["string_value"][row] == bench.metric_value(4, sample)


def test_ndata_carries_aliases_only_and_seq_wraps_per_node() -> None:
    backlog = bench.backlog_messages(600, 3, nodes=2)
    assert [t for t, _ in backlog[:2]] == [
        "spBv1.0/bench/NBIRTH/edge-0",
        "spBv1.0/bench/NBIRTH/edge-1",
    ]
    seqs: dict[str, list[int]] = {}
    for topic, data in backlog[2:]:
        payload = pb().Payload.FromString(data)
        assert all(not m.name and m.alias for m in payload.metrics)
        seqs.setdefault(topic, []).append(payload.seq)
    for found in seqs.values():
        assert len(found) == 300
        assert found[:3] == [1, 2, 3] and found[254:257] == [255, 0, 1]
    _, columns = _decoded(600, 3, nodes=2)
    assert not any(columns["seq_gap"])
    assert bench.expected_rows(600, 3, 2) == len(columns["offset"])


def test_the_decoder_alone_reports_each_stage() -> None:
    backlog = bench.backlog_messages(50, 4)
    found = bench.decoder_alone(backlog, repeat=2)
    assert (found["messages"], found["rows"], found["repeat"]) == (51, 205, 2)
    stages = found["stages"]
    assert list(stages) == [
        "decode_messages", "to_record_batch", "fold", "decode_messages + to_record_batch",
    ]  # fmt: skip
    assert all(
        len(s["seconds_runs"]) == 2 and s["messages_per_second"] > 0 for s in stages.values()
    )
    assert stages["fold"]["rows_per_second"] is None
    top = bench.profile_decoder(backlog, limit=5)
    assert len(top) == 5 and any("decode_messages" in p["function"] for p in top)


def _landing(peer: str, rows: int, messages: int, seconds: float) -> Landing:
    batch = BatchProgress(1, 1_000.0, seconds, rows, {"addBatch": 900})
    cpu = dict.fromkeys(COMPONENTS, 0.5)
    run = QueryRun([batch], seconds + 1, seconds, cpu)
    return Landing(peer, rows, run, 20_000.0, 999.5, 999.9, {"messages": messages})


def test_the_results_render_in_the_report(tmp_path: Path) -> None:
    runs = {
        "sparkplug": [_landing("sparkplug", 10_011, 1_001, s) for s in (2.0, 1.0, 1.25)],
        "raw": [_landing("raw", 1_001, 1_001, s) for s in (0.5, 0.25, 0.5)],
    }
    orders = [["sparkplug", "raw"], ["raw", "sparkplug"], ["sparkplug", "raw"]]
    warmups = {"sparkplug": [_landing("sparkplug", 10_011, 1_001, 4.0)]}
    decoder = bench.decoder_alone(bench.backlog_messages(20, 2), repeat=1)
    profile = [{"function": "x.py:1(f)", "ncalls": "3", "tottime": 0.1, "cumtime": 0.2}]
    params = {
        "births": 1, "ndata_messages": 1_000, "metrics": 10, "qos": 1, "repeat": 3,
        "warmup": bench.warmup_note(1),
    }  # fmt: skip
    results = bench.build_results(runs, orders, warmups, decoder, profile, {}, params)
    assert results["ratios"]["sparkplug/raw"]["runs"] == [0.25, 0.25, 0.4]
    assert [r["ratio"] for r in results["repetitions"]] == [0.25, 0.25, 0.4]
    assert results["peers"]["sparkplug"]["warmup_rates"] == [250]
    run = results["peers"]["sparkplug"]["runs"][0]
    assert (run["messages_per_second"], run["rows_per_second"]) == (500, 5_006)

    out = tmp_path / "results"
    out.mkdir()
    (out / "sparkplug.json").write_text(json.dumps(results))
    target = tmp_path / "REPORT.md"
    assert report.main(["--results", str(out), "--output", str(target)]) == 0
    section = target.read_text().split("\n## Sparkplug B into Delta\n", 1)[1].split("\n## ")[0]
    assert "`python -m bench.sparkplug` → `bench/results/sparkplug.json`" in section
    assert "| sparkplug | 801 | 500 | 1,001 | 8,009 | 10.00 |" in section
    assert "| raw | 2,002 | 2,002 | 4,004 | 2,002 | 1.00 |" in section
    assert "| 1 | raw then sparkplug | 1,001 | 4,004 | 0.25x |" in section
    assert "| sparkplug/raw | 0.25x | 0.25x | 0.40x |" in section
    assert "| `decode_messages` |" in section and "| `fold` |" in section
    assert "| `x.py:1(f)` | 3 | 0.100 | 0.200 |" in section
    assert (
        "Warm-up: 1 unmeasured round, every peer once at the measured size; their rates, msg/s, "
        "the first being the JVM's first query: sparkplug 250."
    ) in section
    assert "unexpected shape" not in section


def test_the_report_says_when_the_file_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    target = tmp_path / "REPORT.md"
    assert report.main(["--results", str(out), "--output", str(target)]) == 0
    section = target.read_text().split("\n## Sparkplug B into Delta\n", 1)[1].split("\n## ")[0]
    assert "*Not run: no results file.*" in section


def test_the_command_line() -> None:
    args = bench.parse_args([])
    assert (args.messages, args.metrics, args.nodes, args.repeat) == (20_000, 10, 1, 3)
    assert (args.warmup_rounds, args.sink, args.output) == (
        1,
        "job",
        RESULTS_DIR / "sparkplug.json",
    )
    args = bench.parse_args(
        ["--messages", "500", "--metrics", "3", "--repeat", "1", "--output", "x.json"]
    )
    assert (args.messages, args.metrics, args.repeat, args.output) == (500, 3, 1, Path("x.json"))


@pytest.mark.parametrize(
    "argv",
    [["--messages", "0"], ["--metrics", "0"], ["--repeat", "0"], ["--warmup-rounds", "-1"],
     ["--nodes", "3", "--messages", "2"], ["--sink", "parquet"]],
)  # fmt: skip
def test_bad_values_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(argv)


def test_the_peers_differ_only_in_the_payload_format(tmp_path: Path) -> None:
    from streaming_jobs.ingest import build_parser, source_options

    options = {}
    for peer in bench.PEERS:
        argv = bench.job_arguments(
            peer, "tcp://127.0.0.1:1883", "c", tmp_path / "t", tmp_path / "c", ["keepAlive=30"]
        )
        options[peer] = source_options(build_parser().parse_args(argv))
    assert options["sparkplug"].pop("payloadFormat") == "sparkplug"
    assert options["sparkplug"] == options["raw"]
    assert options["raw"]["topics"] == bench.TOPIC_FILTER and options["raw"]["qos"] == "1"
