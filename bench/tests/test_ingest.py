"""bench.ingest, bench.ingest_s3 and bench.sparkplug without Spark or a broker: the peers'
names and pairs, the warm-up, the synthetic peer's tasks, the sessions a query uses, the appends
of the receiver alone; the Sparkplug backlog decodes to M named metrics per NDATA, alias-only on
the wire, seq wrapping per node; the decoder alone; the results and their section; the two
peers' queries differ only in the payload format."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import sparkplug as bench
from bench.cpu_sampler import COMPONENTS
from bench.ingest import (
    QOS2_BACKLOG_LIMIT,
    WARMUP_ROWS,
    BatchProgress,
    Landing,
    OursPeer,
    QueryRun,
    Setup,
    query_sessions,
    synthetic_files_per_batch,
    warmup_rounds,
)
from bench.ingest_s3 import Appends
from bench.render import Charts
from connector.options.source import RECORDS_PER_PARTITION
from connector.sparkplug.messages import decode_messages
from connector.sparkplug.payload import decode_payload
from connector.sparkplug.state import SparkplugState


@pytest.mark.parametrize(
    ("peer", "name"),
    [
        (OursPeer("wal", 1), "ours-wal"),  # QoS 1 names carry no QoS suffix
        (OursPeer("inline", 2), "ours-inline-qos2"),
        (OursPeer("inline", 1, "s3"), "ours-s3-inline"),
        (OursPeer("wal", 2, "s3", 0), "ours-s3-qos2-inflight-unbounded"),
        (OursPeer("wal", 1, "local", 1000), "ours-wal-inflight1000"),
    ],
)
def test_peer_names(peer: OursPeer, name: str) -> None:
    assert peer.name == name


def test_a_shared_wal_is_paired_with_the_local_wal_of_its_qos_and_window() -> None:
    assert OursPeer("inline", 2, "s3", 0).local_wal == OursPeer("wal", 2, "local", 0)


@pytest.mark.parametrize(
    ("round_rows", "target", "rounds"),
    [(720_000, WARMUP_ROWS, 1), (QOS2_BACKLOG_LIMIT, WARMUP_ROWS, 10), (200_000, 600_001, 4),
     (60_000, 0, 1), (0, WARMUP_ROWS, 1)],
)  # fmt: skip
def test_warm_up_rounds_land_at_least_the_target(round_rows: int, target: int, rounds: int) -> None:
    assert warmup_rounds(round_rows, target) == rounds


def test_the_synthetic_peer_runs_as_many_tasks_as_the_source_would() -> None:
    assert synthetic_files_per_batch(60_000) == 1
    assert synthetic_files_per_batch(RECORDS_PER_PARTITION + 1) == 2


def test_a_query_with_two_receivers_uses_two_shared_sessions() -> None:
    assert query_sessions("c", 1, Setup("0 seconds", 1.0)) == [("c", "plant/+/+/telemetry")]
    shared = query_sessions("c", 2, Setup("0 seconds", 1.0, ("receivers=2",)))
    assert len(shared) == 2 and all(f.startswith("$share/") for _, f in shared)


def test_appends_separate_stored_reads_from_releases() -> None:
    calls = [(300, 0, 0.004), (0, 20, 0.002), (100, 5, 0.006), (500, 0, 0.008)]
    found = Appends("ours-s3", 900, 0.04, calls).as_dict()
    assert (found["appends"], found["appends_of_releases_only"], found["rate"]) == (4, 1, 22_500)
    assert found["messages_per_append"]["median"] == 300
    assert found["append_ms"]["max"] == 8.0 and found["share_of_time_in_appends"] == 0.5


def test_the_backlog_decodes_to_every_metric_named_and_typed() -> None:
    backlog = bench.backlog_messages(600, 7, nodes=2)
    columns = decode_messages(bench.stored(backlog), SparkplugState()).columns
    assert len(columns["offset"]) == bench.expected_rows(600, 7, 2) == 2 * 8 + 600 * 7
    assert all(r is None for r in columns["reason"]) and not any(columns["seq_gap"])
    data = [i for i, kind in enumerate(columns["message_type"]) if kind == "NDATA"]
    assert [columns["metric_name"][i] for i in data[:7]] == [bench.metric_name(k) for k in range(7)]
    int32 = [columns["long_value"][i] for i in data if columns["datatype"][i] == "Int32"]
    assert min(int32) < 0 < max(int32)  # sign-extended on the wire, signed in the row
    row = data[(123 - 1) * 7 * 2 + 2]  # node 0's 123rd NDATA: its Double
    assert columns["double_value"][row] == bench.metric_value(2, 123)
    seqs = [decode_payload(p).seq for t, p in backlog[2:] if t.endswith("edge-0")]
    assert seqs[:2] == [1, 2] and seqs[254:257] == [255, 0, 1]
    assert all(not m.HasField("name") and m.alias for m in decode_payload(backlog[2][1]).metrics)


def test_a_baseline_revision_decodes_beside_this_one() -> None:
    """``--baseline``: another revision's decoder, imported from git beside this one, times the
    same messages; here this revision against itself, the same rows."""
    backlog = bench.backlog_messages(40, 5)
    ours = bench.decoder_alone(backlog, 1)
    with bench.baseline_decoder("HEAD") as theirs:
        baseline = bench.decoder_alone(backlog, 1, theirs)
    assert baseline["rows"] == ours["rows"] == bench.expected_rows(40, 5)
    assert set(bench.decoder_ratios(ours, baseline)) == set(ours["stages"])
    assert not any(m.startswith(bench.BASELINE_PACKAGE) for m in sys.modules)


def test_the_section_shows_the_baseline_and_the_run_before(tmp_path: Path) -> None:
    results = Path(bench.__file__).parent / "results"
    data = json.loads((results / "sparkplug.json").read_text())
    data["before"] = bench.before_of(results / "before" / "sparkplug.json")
    text = "\n".join(bench.section(data, Charts(tmp_path)))
    assert "Before and after" in text and f"before ({data['before']['git_revision']})" in text
    if "baseline" in data["decoder"]:
        assert "now/then" in text


def _landing(peer: str, rows: int, seconds: float) -> Landing:
    run = QueryRun([BatchProgress(1, 1_000.0, seconds, rows)], seconds, seconds, {})
    run.cpu = dict.fromkeys(COMPONENTS, 0.5)
    return Landing(peer, rows, run, 20_000.0, 999.5, 999.9, {"messages": 1_001})


def test_the_results_and_their_section() -> None:
    runs = {
        "sparkplug": [_landing("sparkplug", 10_011, s) for s in (2.0, 1.0, 1.25)],
        "raw": [_landing("raw", 1_001, s) for s in (0.5, 0.25, 0.5)],
    }
    orders = [["sparkplug", "raw"], ["raw", "sparkplug"], ["sparkplug", "raw"]]
    warmups = {"sparkplug": [_landing("sparkplug", 10_011, 4.0)]}
    decoder = bench.decoder_alone(bench.backlog_messages(20, 2), repeat=2)
    assert (decoder["messages"], decoder["rows"]) == (21, 43)
    assert decoder["stages"]["fold"]["rows_per_second"] is None
    params = {"births": 1, "ndata_messages": 1_000, "metrics": 10, "warmup": bench.warmup_note(1)}
    results = bench.build_results(runs, orders, warmups, decoder, None, {}, params)
    assert [r["ratio"] for r in results["repetitions"]] == [0.25, 0.25, 0.4]
    assert results["cpu_seconds_per_100k_messages"]["raw"]["mosquitto"] == 49.95
    text = "\n".join(bench.section(results, Charts(None)))
    assert "| sparkplug | 801 | 500 | 1,001 | 8,009 | 10.00 |" in text
    assert "| 1 | raw then sparkplug | 1,001 | 4,004 | 0.25x |" in text
    assert "the first being the JVM's first query: sparkplug 250." in text
    assert "| `fold` |" in text and "| total of the pipeline | 499.50 | 499.50 |" in text


def test_the_peers_differ_only_in_the_payload_format(tmp_path: Path) -> None:
    from streaming_jobs.ingest import build_parser, source_options

    where = ["--broker", "tcp://127.0.0.1:1883", "--table", str(tmp_path), "--checkpoint", "c"]
    options = {
        peer: source_options(build_parser().parse_args([*where, *bench.job_arguments(peer, "c")]))
        for peer in bench.PEERS
    }
    assert options["sparkplug"].pop("payloadFormat") == "sparkplug"
    assert options["sparkplug"] == options["raw"]
