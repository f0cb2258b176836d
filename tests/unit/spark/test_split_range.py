"""How a batch's WAL range becomes Spark partitions: the fewest near-equal ranges of at most
``recordsPerPartition`` records (decision 30; no Spark, no broker)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from connector.options.source import RECORDS_PER_PARTITION, SourceOptions
from connector.spark.reader.stream_reader import split_range

DEFAULT_PER_PARTITION = SourceOptions.parse(
    {"brokerUrl": "tcp://broker.example:1883", "topic": "t/#", "clientId": "q"}
).records_per_partition


def test_a_batch_within_records_per_partition_is_one_task() -> None:
    assert DEFAULT_PER_PARTITION == RECORDS_PER_PARTITION == 100_000
    assert split_range(7, 60_007, DEFAULT_PER_PARTITION) == [(7, 60_007)]
    assert split_range(0, 100_000, DEFAULT_PER_PARTITION) == [(0, 100_000)]


def test_a_larger_batch_is_cut_into_near_equal_ranges() -> None:
    assert split_range(0, 200_000, DEFAULT_PER_PARTITION) == [(0, 100_000), (100_000, 200_000)]
    assert split_range(10, 100_011, DEFAULT_PER_PARTITION) == [(10, 50_010), (50_010, 100_011)]
    assert split_range(0, 7, 3) == [(0, 2), (2, 4), (4, 7)]


def test_an_empty_range_has_no_partition() -> None:
    assert split_range(5, 5, 10) == []
    assert split_range(5, 4, 10) == []


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(start, count, per_partition, parts): ``count`` needs exactly ``parts`` ranges."""
    per_partition = draw(st.integers(min_value=1, max_value=10**6))
    parts = draw(st.integers(min_value=1, max_value=500))
    count = draw(st.integers((parts - 1) * per_partition + 1, parts * per_partition))
    return draw(st.integers(min_value=0, max_value=10**12)), count, per_partition, parts


@given(batches())
def test_ranges_cover_the_batch_in_order_with_the_fewest_parts(
    batch: tuple[int, int, int, int],
) -> None:
    start, count, per_partition, parts = batch
    ranges = split_range(start, start + count, per_partition)
    assert len(ranges) == parts
    assert ranges[0][0] == start and ranges[-1][1] == start + count
    assert all(a[1] == b[0] for a, b in pairwise(ranges))
    sizes = [b - a for a, b in ranges]
    assert max(sizes) <= per_partition
    assert max(sizes) - min(sizes) <= 1
