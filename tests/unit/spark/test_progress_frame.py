"""The source's figures over a query's progress as a pandas frame (``progress_frame``): one row
per progress report and receiver, every scalar field of a receiver, counts by rule flattened."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from connector.receiver.shard_handles import ShardStatus
from connector.spark.reader.progress_frame import PROGRESS_COLUMNS, progress_frame, source_reports
from connector.spark.reader.progress_report import REPORT_VERSION, progress_report, receiver_report
from streaming_jobs.progress import delivery

RECEIVER_FIELDS = list(receiver_report(0, ShardStatus("", 0, 0, 0)))


def status(next_offset: int, committed: int, **delivery: object) -> ShardStatus:
    return ShardStatus("wal-id", 0, next_offset, committed, delivery=dict(delivery))


def source(latest: Any, description: str = "MqttDataSource") -> dict[str, Any]:
    """A source's entry of a progress, as Spark's JSON has it."""
    return {
        "description": description,
        "startOffset": None,
        "endOffset": None,
        "latestOffset": latest if latest is None or isinstance(latest, str) else json.dumps(latest),
        "numInputRows": 0,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.0,
        "metrics": {},
    }


def progress(
    batch: int,
    statuses: Sequence[ShardStatus] | None,
    *,
    second: int = 0,
    rows: int = 10,
    sources: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A query progress whose source reports ``statuses`` (the source's own report)."""
    report = progress_report({"wal": "wal-id", "offset": 0}, statuses)
    return {
        "id": str(uuid.UUID(int=1)),
        "runId": str(uuid.UUID(int=2)),
        "name": None,
        "timestamp": f"2025-06-01T10:00:{second:02d}.500Z",
        "batchId": batch,
        "batchDuration": 500,
        "numInputRows": rows,
        "inputRowsPerSecond": rows / 2,
        "processedRowsPerSecond": rows * 2.0,
        "durationMs": {"addBatch": 400, "triggerExecution": 500},
        "eventTime": {},
        "stateOperators": [],
        "sources": [source(report)] if sources is None else sources,
        "sink": {"description": "DeltaSink", "numOutputRows": rows, "metrics": {}},
    }


def test_one_receiver_one_row_per_progress() -> None:
    second = status(12, 10, connections=2, connected=True, possibleDuplicates=1)
    progresses = [
        progress(0, [status(10, 0, connections=1, connected=True)], second=1),
        progress(1, [second], second=3),
    ]
    frame = progress_frame(progresses)
    assert list(frame.columns[: len(PROGRESS_COLUMNS)]) == list(PROGRESS_COLUMNS)
    assert list(frame["batchId"]) == [0, 1]
    assert list(frame["receiver"]) == [0, 0]
    assert list(frame["walHighWaterMark"]) == [10, 12]
    assert list(frame["committed"]) == [0, 10]
    assert list(frame["backlog"]) == [10, 2]
    assert list(frame["reconnects"]) == [0, 1]
    assert list(frame["possibleDuplicates"]) == [0, 1]
    assert list(frame["connected"]) == [True, True]
    assert list(frame["numInputRows"]) == [10, 10]
    assert list(frame["inputRowsPerSecond"]) == [5.0, 5.0]
    assert str(frame["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert frame["timestamp"].iloc[1] == pd.Timestamp("2025-06-01T10:00:03.500Z")


def test_several_receivers_one_row_each() -> None:
    frame = progress_frame(
        progress(4, [status(10, 4), status(7, 7), status(30, 1)])
    )  # one progress, not a list
    assert list(frame["batchId"]) == [4, 4, 4]
    assert list(frame["receiver"]) == [0, 1, 2]
    assert list(frame["backlog"]) == [6, 0, 29]


def test_every_scalar_field_of_a_receiver_is_a_column() -> None:
    report = progress_report({}, [status(3, 1)])
    report["receivers"][0].update(laterSeconds=2.5, laterCount=4096, note="x", shape=[1])
    frame = progress_frame([progress(0, None, sources=[source(report)])])
    row = frame.iloc[0]
    assert (row["laterSeconds"], row["laterCount"], row["note"]) == (2.5, 4096, "x")
    assert "shape" not in frame.columns  # not a scalar, not counts by name
    assert list(frame.columns[len(PROGRESS_COLUMNS) :][: len(RECEIVER_FIELDS)]) == RECEIVER_FIELDS


def test_broker_faults_give_a_total_and_a_column_per_rule() -> None:
    progresses = [
        progress(0, [status(5, 0, brokerFaults={"qos-above-granted": 2}), status(1, 1)]),
        progress(1, [status(5, 5, brokerFaults={"qos-above-granted": 2, "a-rule": 1})]),
    ]
    frame = progress_frame(progresses)
    assert list(frame["brokerFaults"]) == [2, 0, 3]
    assert list(frame["brokerFaults.qos-above-granted"]) == [2, 0, 2]
    assert list(frame["brokerFaults.a-rule"]) == [0, 0, 1]
    assert str(frame["brokerFaults.a-rule"].dtype) == "int64"
    columns = list(frame.columns)
    at = columns.index("brokerFaults")
    assert columns[at + 1 : at + 3] == ["brokerFaults.a-rule", "brokerFaults.qos-above-granted"]


def test_progress_without_the_source_s_report_gives_no_row() -> None:
    kafka = source({"events": {"0": 120}}, "KafkaV2[Subscribe[events]]")
    progresses = [
        progress(0, [status(1, 0)], sources=[source(None)]),  # latest offset not known yet
        progress(1, [status(1, 0)], sources=[kafka]),
        progress(2, [status(1, 0)], sources=[source("123", "RateStreamV2")]),
        progress(3, [status(1, 0)], sources=[]),
        progress(4, [status(1, 0)], sources=[source({"wal": "w", "offset": 4})]),  # no version
        progress(5, None),  # before the receivers started
        progress(6, [status(9, 2)]),
    ]
    frame = progress_frame(progresses)
    assert list(frame["batchId"]) == [6]
    assert list(frame["backlog"]) == [7]


def test_the_source_s_report_is_found_beside_other_sources() -> None:
    report = progress_report({"wal": "w", "offset": 3}, [status(3, 1)])
    sources = [source({"events": {"0": 1}}, "Kafka"), source(report)]
    frame = progress_frame([progress(0, None, sources=sources)])
    assert list(frame["source"]) == [1]
    assert list(frame["backlog"]) == [2]
    assert source_reports(progress(0, None, sources=sources)) == [(1, report)]
    assert delivery(progress(0, None, sources=sources)) == report["delivery"]


def test_a_report_of_another_version_is_refused() -> None:
    report = {**progress_report({}, [status(3, 1)]), "version": REPORT_VERSION + 1}
    with pytest.raises(ValueError, match=f"version {REPORT_VERSION + 1};.*reads version 1"):
        progress_frame([progress(0, None, sources=[source(report)])])


@pytest.mark.parametrize("empty", [[], None, [progress(0, None)]], ids=["list", "none", "idle"])
def test_no_receiver_gives_an_empty_frame_with_the_columns(empty: Any) -> None:
    frame = progress_frame(empty)
    assert frame.empty
    assert list(frame.columns) == [*PROGRESS_COLUMNS, *RECEIVER_FIELDS]
    assert str(frame["timestamp"].dtype) == "datetime64[ns, UTC]"


class Query:
    """A ``StreamingQuery``'s progress: PySpark 4 gives ``StreamingQueryProgress`` objects."""

    def __init__(self, progresses: list[dict[str, Any]]) -> None:
        self.recentProgress = [StreamingQueryProgress.fromJson(p) for p in progresses]
        self.lastProgress = self.recentProgress[-1]


def test_a_query_s_recent_progress_objects_and_json_text() -> None:
    progresses = [progress(0, [status(4, 0)]), progress(1, [status(6, 4), status(2, 2)])]
    query = Query(progresses)
    assert isinstance(query.lastProgress, StreamingQueryProgress)
    frame = progress_frame(query)
    assert list(zip(frame["batchId"], frame["receiver"], frame["backlog"], strict=True)) == [
        (0, 0, 4),
        (1, 0, 2),
        (1, 1, 0),
    ]
    assert progress_frame(query.lastProgress).equals(frame.iloc[1:].reset_index(drop=True))
    assert progress_frame([p.json for p in query.recentProgress]).equals(frame)


def test_not_a_progress_is_refused() -> None:
    with pytest.raises(TypeError, match="not a progress report: int"):
        progress_frame([1])
    with pytest.raises(TypeError, match="not a query or progress reports: int"):
        progress_frame(1)


def test_without_pandas_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="progress_frame needs pandas"):
        progress_frame([])
