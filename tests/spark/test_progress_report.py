"""The source's figures read from a real query's progress
(``query.lastProgress["sources"][0]["latestOffset"]``, docs/operations.md)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from connector.spark.reader.progress_frame import progress_frame
from connector.spark.reader.progress_report import REPORT_VERSION
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import StreamDirs, start_stream, wait_for_rows
from tests.support.waiting import wait_subscribed, wait_until


def latest_report(query: StreamingQuery) -> dict[str, Any] | None:
    progress = query.lastProgress
    if progress is None or not progress["sources"]:
        return None
    text = progress["sources"][0]["latestOffset"]
    return None if text is None else json.loads(text)


def test_the_progress_reports_each_receiver(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    query = start_stream(spark, broker.url, dirs, topic="prog/#", clientId=client_id)
    try:
        wait_subscribed(broker, client_id, "prog/#", 1)
        publish(broker, numbered("prog/t", 5))
        wait_for_rows(spark, dirs.table, 5, [query])

        def landed() -> dict[str, Any] | None:
            report = latest_report(query)
            receivers = (report or {}).get("receivers") or []
            done = receivers and receivers[0]["walHighWaterMark"] == 5
            return report if done and receivers[0]["committed"] == 5 else None

        report = wait_until(landed, 60, interval=0.1, message=lambda: str(latest_report(query)))
    finally:
        query.stop()
    assert report["version"] == REPORT_VERSION
    (receiver,) = report["receivers"]
    assert receiver["receiver"] == 0 and receiver["backlog"] == 0
    assert receiver["connected"] is True and receiver["reconnects"] == 0
    assert receiver["possibleDuplicates"] == 0 and receiver["brokerFaults"] == {}
    assert report["offset"] == 5
    # everything committed: nothing waits; the WAL still holds its one segment's records
    assert receiver["batchEnd"] == 5 and receiver["oldestUncommittedSeconds"] == 0.0
    # the rate is over the last 10 s, and the idle report that shows all committed may be later
    assert receiver["received"] == 5 and 0 <= receiver["receiveRate"] <= 5
    assert receiver["walBytes"] > sum(len(m.payload) for m in numbered("prog/t", 5))

    # The same figures as a frame over the query's recent progress; its last rows are the last
    # progress's receivers (the query stopped: no progress follows).
    last, final = query.lastProgress, latest_report(query)
    assert last is not None and final is not None
    frame = progress_frame(query)
    assert len(frame) >= 1 and frame["committed"].is_monotonic_increasing
    row = frame.iloc[-1]
    assert row["timestamp"] == pd.Timestamp(last["timestamp"])
    assert (row["batchId"], row["numInputRows"]) == (last["batchId"], last["numInputRows"])
    (figures,) = final["receivers"]
    differ = {
        k: (row[k], v)
        for k, v in figures.items()
        if not isinstance(v, dict) and not (v is None and pd.isna(row[k])) and row[k] != v
    }  # a figure not known (None) is NaN in a column of numbers
    assert differ == {}
    assert (row["backlog"], row["committed"], row["brokerFaults"]) == (0, 5, 0)


def test_several_receivers_each_report_their_figures(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    """Receivers in processes of their own (``receivers=2``, topics split) answer the same
    figures through the shard worker's status."""
    broker = broker_factory()
    client_id = unique_id("spark-")
    query = start_stream(
        spark, broker.url, dirs, topics="pra/#,prb/#", clientId=client_id, receivers=2,
        shardBy="topics", qos=1,
    )  # fmt: skip
    try:
        for index, topic in enumerate(("pra/#", "prb/#")):
            wait_subscribed(broker, f"{client_id}-{index}", topic, 1)
        publish(broker, numbered("pra/t", 6) + numbered("prb/t", 4))
        wait_for_rows(spark, dirs.table, 10, [query])

        def landed() -> dict[str, Any] | None:
            report = latest_report(query)
            receivers = (report or {}).get("receivers") or []
            done = [r["committed"] for r in receivers] == [6, 4]
            return report if done else None

        report = wait_until(landed, 60, interval=0.1, message=lambda: str(latest_report(query)))
    finally:
        query.stop()
    assert [r["receiver"] for r in report["receivers"]] == [0, 1]
    for receiver, count in zip(report["receivers"], (6, 4), strict=True):
        assert receiver["walHighWaterMark"] == receiver["batchEnd"] == count
        assert receiver["received"] == count and receiver["backlog"] == 0
        assert receiver["oldestUncommittedSeconds"] == 0.0 and receiver["walBytes"] > 0
        assert receiver["connected"] is True
