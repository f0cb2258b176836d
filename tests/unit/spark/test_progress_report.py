"""The source's figures in the query progress (``reportLatestOffset``): versioned, one entry
per receiver, the delivery counters summed."""

from __future__ import annotations

from connector.receiver.shard_handles import ShardStatus
from connector.spark.reader.progress_report import REPORT_VERSION, progress_report, receiver_report


def status(next_offset: int, committed: int, **delivery: object) -> ShardStatus:
    return ShardStatus("wal-id", 0, next_offset, committed, delivery=dict(delivery))


def test_a_receiver_s_figures() -> None:
    one = status(120, 100, connections=3, connected=True, possibleDuplicates=2,
                 duplicatesDropped=1, brokerFaults={"qos-above-granted": 4},
                 oldestUncommittedSeconds=2.5, received=130, receiveRate=12.5,
                 walBytes=4096, subscribed=True)  # fmt: skip
    assert receiver_report(0, one) == {
        "receiver": 0,
        "walHighWaterMark": 120,
        "committed": 100,
        "batchEnd": 100,
        "backlog": 20,
        "oldestUncommittedSeconds": 2.5,
        "received": 130,
        "receiveRate": 12.5,
        "walBytes": 4096,
        "connected": True,
        "subscribed": True,
        "reconnects": 2,
        "frozen": False,
        "duplicatesDropped": 1,
        "possibleDuplicates": 2,
        "brokerFaults": {"qos-above-granted": 4},
    }
    assert receiver_report(1, status(5, 9))["backlog"] == 0  # never negative
    assert receiver_report(1, status(5, 0))["reconnects"] == 0  # no connection yet
    # a planned batch: the backlog is what waits beyond it
    planned = receiver_report(0, one, batch_end=110)
    assert (planned["committed"], planned["batchEnd"], planned["backlog"]) == (100, 110, 10)
    unknown = receiver_report(1, status(5, 0, oldestUncommittedSeconds=None))
    assert unknown["oldestUncommittedSeconds"] is None  # not 0: the WAL could not say


def test_the_report_keeps_the_offset_and_sums_the_receivers() -> None:
    statuses = [
        status(10, 4, connections=1, connected=True, possibleDuplicates=1,
               brokerFaults={"a": 1}),
        status(7, 7, connections=2, connected=False, possibleDuplicates=2,
               brokerFaults={"a": 2, "b": 1}),
    ]  # fmt: skip
    report = progress_report({"shards": [{"wal": "x", "offset": 10}]}, statuses, [8, 7])
    assert report["shards"] == [{"wal": "x", "offset": 10}]
    assert [r["batchEnd"] for r in report["receivers"]] == [8, 7]
    assert report["version"] == REPORT_VERSION == 1
    assert report["delivery"]["possibleDuplicates"] == 3
    assert report["delivery"]["brokerFaults"] == {"a": 3, "b": 1}
    assert [r["backlog"] for r in report["receivers"]] == [2, 0]
    assert [r["connected"] for r in report["receivers"]] == [True, False]


def test_before_the_receivers_start_the_report_has_none() -> None:
    report = progress_report({}, None)
    assert report["version"] == REPORT_VERSION
    assert report["receivers"] == []
    assert report["delivery"]["possibleDuplicates"] == 0
