"""Several receivers per query: option validation, per-shard options, offsets, fair limits and
the WAL layout guard (no Spark, no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.options.source import InvalidOptionError, SourceOptions
from connector.receiver.shards import (
    Position,
    ShardLayoutError,
    check_wal_layout,
    decode_offset,
    drops_retained,
    encode_offset,
    fair_split,
    shard_options,
)
from connector.wal import WalWriter

BASE = {"brokerUrl": "tcp://broker.example:1883", "topics": "a/#,b/+,c", "clientId": "q"}


def test_one_receiver_by_default_and_share_mode_when_more() -> None:
    assert SourceOptions.parse(BASE).receivers == 1
    opts = SourceOptions.parse({**BASE, "receivers": "3"})
    assert (opts.receivers, opts.shard_by, opts.share_group) == (3, "share", "q")
    assert SourceOptions.parse({**BASE, "clientId": "a/b+#", "receivers": "2"}).share_group == (
        "a_b__"
    )


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        ({"receivers": "0"}, ["'receivers'", "1..64"]),
        ({"receivers": "two"}, ["'receivers'", "integer"]),
        ({"receivers": "2", "shardBy": "hash"}, ["'shardBy'", "share, topics"]),
        ({"receivers": "4", "shardBy": "topics"}, ["'receivers' (4)", "filters", "(3)"]),
        ({"receivers": "2", "mqttVersion": "3.1"}, ["'shardBy' share", "3.1.1", "topics"]),
        ({"receivers": "2", "shareGroup": "g/1"}, ["'shareGroup'", "'/'"]),
        ({"receivers": "2", "shareGroup": ""}, ["'shareGroup'", "non-empty"]),
        ({"receivers": "2", "shardBy": "topics", "shareGroup": "g"}, ["'shareGroup'", "share"]),
        ({"receivers": "2", "topics": "$share/g/a/#"}, ["plain topic filters", "$share/g/a/#"]),
        (
            {"receivers": "3", "shardBy": "topics", "mqttVersion": "3.1", "clientId": "x" * 22},
            ["'clientId'", "23 characters"],
        ),
    ],
)
def test_invalid_shard_options_are_named(extra: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(InvalidOptionError) as info:
        SourceOptions.parse({**BASE, **extra})
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_default_client_id_leaves_room_for_receiver_suffixes_with_mqtt_3_1() -> None:
    base = {"brokerUrl": "tcp://h", "topics": "a/#,b/#", "mqttVersion": "3.1"}
    one = SourceOptions.parse(base)
    two = SourceOptions.parse({**base, "receivers": "2", "shardBy": "topics"})
    assert len(one.client_id) == 23
    assert len(shard_options(two, 1).client_id) <= 23


def test_share_mode_gives_every_shard_every_filter_as_a_shared_subscription() -> None:
    opts = SourceOptions.parse({**BASE, "receivers": "2", "shareGroup": "grp", "walPath": "/w"})
    one = shard_options(opts, 1)
    assert one.topics == ("$share/grp/a/#", "$share/grp/b/+", "$share/grp/c")
    assert (one.client_id, one.wal_path, one.receivers) == ("q-1", "/w/shard-1", 1)
    assert (one.broker, one.qos, one.password) == (opts.broker, opts.qos, opts.password)
    # Retained copies (sent to every member on subscribe) are kept by shard 0 only.
    assert [drops_retained(opts, i) for i in range(2)] == [False, True]


def test_topics_mode_gives_each_filter_to_exactly_one_shard() -> None:
    opts = SourceOptions.parse({**BASE, "receivers": "2", "shardBy": "topics"})
    assert [shard_options(opts, i).topics for i in range(2)] == [("a/#", "c"), ("b/+",)]
    assert not drops_retained(opts, 1)
    with pytest.raises(ValueError):
        shard_options(opts, 2)


def test_single_receiver_offsets_keep_their_format() -> None:
    offset = encode_offset([Position("w0", 7)])
    assert offset == {"wal": "w0", "offset": 7}
    assert decode_offset(offset, 1) == [Position("w0", 7)]


def test_shard_offsets_round_trip_and_a_changed_count_is_refused() -> None:
    offset = encode_offset([Position("w0", 3), Position("w1", 5)])
    assert offset == {"shards": [{"wal": "w0", "offset": 3}, {"wal": "w1", "offset": 5}]}
    assert decode_offset(offset, 2) == [Position("w0", 3), Position("w1", 5)]
    with pytest.raises(ShardLayoutError, match=r"2 receiver\(s\).*'receivers' is 3"):
        decode_offset(offset, 3)
    with pytest.raises(
        ShardLayoutError, match=r"1 receiver\(s\).*'receivers' is 2.*new checkpoint"
    ):
        decode_offset({"wal": "w0", "offset": 1}, 2)
    with pytest.raises(ShardLayoutError, match="malformed"):
        decode_offset({"shards": []}, 2)


@pytest.mark.parametrize(
    ("available", "budget", "expected"),
    [
        ([10, 10], 10, [5, 5]),
        ([2, 100], 10, [2, 8]),
        ([0, 7, 7], 5, [0, 3, 2]),
        ([3, 4], 100, [3, 4]),
        ([5, 5], 0, [0, 0]),
        ([1, 1, 1], 2, [1, 1, 0]),
    ],
)
def test_fair_split_is_max_min_fair_and_within_budget(
    available: list[int], budget: int, expected: list[int]
) -> None:
    assert fair_split(available, budget) == expected


def test_wal_layout_guard_refuses_to_abandon_shard_wals(tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    two = SourceOptions.parse({**BASE, "receivers": "2", "walPath": str(wal)})
    check_wal_layout(two)  # nothing there yet
    for index in range(2):
        WalWriter.open(wal / f"shard-{index}").close()
    check_wal_layout(two)
    three = SourceOptions.parse({**BASE, "receivers": "3", "walPath": str(wal)})
    check_wal_layout(three)  # a new shard joins; the existing ones keep their data
    with pytest.raises(ShardLayoutError, match=r"2 receivers.*'receivers' is 1"):
        check_wal_layout(SourceOptions.parse({**BASE, "walPath": str(wal)}))
    WalWriter.open(wal / "shard-2").close()
    with pytest.raises(ShardLayoutError, match="shard-2 would never be read"):
        check_wal_layout(two)

    single = tmp_path / "single"
    WalWriter.open(single).close()
    with pytest.raises(ShardLayoutError, match="single receiver"):
        check_wal_layout(SourceOptions.parse({**BASE, "receivers": "2", "walPath": str(single)}))
