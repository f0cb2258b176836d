"""Final positions (``connector.receiver.shards.Position``): a ``Trigger.AvailableNow`` run's
last batch ends at a position whose WAL stored nothing past it, and a checkpoint at a final
position takes a new WAL without data loss; positions that are not final keep the old offset
format and the old data-loss rule."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from connector.options.source import SourceOptions
from connector.receiver.shard_handles import ShardStatus
from connector.receiver.shards import Position, decode_offset, encode_offset
from connector.source import DataLossError
from connector.spark.reader.stream_reader import MqttStreamReader

BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": "plant/#", "walPath": "/wal"}


def test_positions_that_are_not_final_keep_the_old_format() -> None:
    assert encode_offset([Position("w0", 7)]) == {"wal": "w0", "offset": 7}
    assert encode_offset([Position("w0", 3), Position("w1", 5)]) == {
        "shards": [{"wal": "w0", "offset": 3}, {"wal": "w1", "offset": 5}]
    }
    assert decode_offset({"wal": "w0", "offset": 7}, 1) == [Position("w0", 7, final=False)]


def test_final_positions_round_trip() -> None:
    one = encode_offset([Position("w0", 7, final=True)])
    assert one == {"wal": "w0", "offset": 7, "final": True}
    assert decode_offset(one, 1) == [Position("w0", 7, final=True)]
    two = encode_offset([Position("w0", 3), Position("w1", 5, final=True)])
    assert two == {
        "shards": [{"wal": "w0", "offset": 3}, {"wal": "w1", "offset": 5, "final": True}]
    }
    assert decode_offset(two, 2) == [Position("w0", 3), Position("w1", 5, final=True)]
    # Only a JSON true makes a position final.
    assert decode_offset({"wal": "w0", "offset": 7, "final": "yes"}, 1) == [Position("w0", 7)]


class FakeShard:
    """A shard whose WAL holds [first, next)."""

    def __init__(self, index: int, identity: str, first: int, next_: int) -> None:
        self.index = index
        self.identity = identity
        self.wal_path = f"/wal/shard-{index}"
        self.first = first
        self.next = next_
        self.committed = first

    def check(self) -> None:
        pass

    def status(self) -> ShardStatus:
        return ShardStatus(self.identity, self.first, self.next, self.committed, frozen=True)

    def commit(self, offset: int) -> ShardStatus:
        self.committed = max(self.committed, offset)
        return self.status()


def reader(shards: list[FakeShard], targets: list[int] | None, **extra: str) -> MqttStreamReader:
    options = {**BASE, **extra}
    if len(shards) > 1:
        options["receivers"] = str(len(shards))
    result = MqttStreamReader(SourceOptions.parse(options))
    result._shards = shards  # type: ignore[assignment]
    result._targets = targets
    result._settled = True
    return result


def test_a_final_position_in_a_replaced_wal_continues_from_the_new_wal() -> None:
    shard = FakeShard(0, "new", 0, 40)
    source = reader([shard], None)
    assert source._resolve(shard, Position("old", 900, final=True), shard.status()) == 0  # type: ignore[arg-type]
    start = {"wal": "old", "offset": 900, "final": True}
    logged = source.latestOffset(start, ReadAllAvailable())
    assert logged == {"wal": "old", "offset": 900}  # first: the start, logged as not final
    assert source.partitions(start, logged) == []
    assert source.latestOffset(logged, ReadAllAvailable()) == {"wal": "new", "offset": 40}


def test_a_position_that_is_not_final_in_a_replaced_wal_is_data_loss() -> None:
    shard = FakeShard(0, "new", 0, 40)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        reader([shard], None).latestOffset({"wal": "old", "offset": 900}, ReadAllAvailable())


def test_a_final_position_whose_wal_is_there_reads_on_from_it() -> None:
    shard = FakeShard(0, "w", 100, 140)
    source = reader([shard], None)
    logged = source.latestOffset({"wal": "w", "offset": 120, "final": True}, ReadAllAvailable())
    assert logged == {"wal": "w", "offset": 120}
    assert source.latestOffset(logged, ReadAllAvailable()) == {"wal": "w", "offset": 140}
    source = reader([shard], None)
    logged = source.latestOffset({"wal": "w", "offset": 150, "final": True}, ReadAllAvailable())
    with pytest.raises(DataLossError, match="ends at 140"):
        source.latestOffset(logged, ReadAllAvailable())


def test_only_the_batch_that_reaches_the_frozen_target_ends_final() -> None:
    shard = FakeShard(0, "w", 0, 100)
    source = reader([shard], [100])
    first = source.latestOffset({"wal": "w", "offset": 0}, ReadMaxRows(60))
    assert first == {"wal": "w", "offset": 60}
    last = source.latestOffset(first, ReadMaxRows(60))
    assert last == {"wal": "w", "offset": 100, "final": True}
    assert source.latestOffset(last, ReadMaxRows(60)) == last


def test_nothing_new_returns_the_start_as_it_was() -> None:
    # A final flag alone is no new data: Spark plans no batch for it.
    shard = FakeShard(0, "w", 0, 50)
    start = {"wal": "w", "offset": 50}
    assert reader([shard], [50]).latestOffset(start, ReadAllAvailable()) == start


def test_each_shard_at_its_target_ends_final() -> None:
    shards = [FakeShard(0, "a", 0, 10), FakeShard(1, "b", 0, 30)]
    source = reader(shards, [10, 30])
    logged = source.latestOffset(
        {"shards": [{"wal": "a", "offset": 10, "final": True}, {"wal": "b", "offset": 0}]},
        ReadAllAvailable(),
    )
    assert logged == {"shards": [{"wal": "a", "offset": 10}, {"wal": "b", "offset": 0}]}
    end = source.latestOffset(logged, ReadAllAvailable())
    assert end == {
        "shards": [
            {"wal": "a", "offset": 10, "final": True},
            {"wal": "b", "offset": 30, "final": True},
        ]
    }


def test_a_final_start_is_logged_as_not_final_before_any_receiver_starts() -> None:
    """Until Spark has logged the run's start as not final, no receiver connects: a run that
    then acknowledges messages and loses its WAL leaves a position that is not final, and the
    next run reports the loss instead of taking a new WAL."""
    options = SourceOptions.parse({**BASE, "brokerUrl": "tcp://127.0.0.1:1"})
    source = MqttStreamReader(options)
    source.prepareForTriggerAvailableNow()
    start = {"wal": "old", "offset": 900, "final": True}
    logged = source.latestOffset(start, ReadAllAvailable())
    assert logged == {"wal": "old", "offset": 900}
    assert source.partitions(start, logged) == []
    assert source.reportLatestOffset()["delivery"]["possibleDuplicates"] == 0
    assert source._shards is None  # nothing started, nothing connected
    # Another process finds that position not final next to a new WAL: data loss, as before.
    shard = FakeShard(0, "new", 0, 40)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        reader([shard], None).latestOffset(logged, ReadAllAvailable())
