"""The synthetic peer of ``bench.ingest`` runs as many tasks per batch as the source would."""

from __future__ import annotations

import pytest

from bench.ingest import synthetic_files_per_batch
from connector.options.source import RECORDS_PER_PARTITION
from connector.spark.reader.stream_reader import split_range


@pytest.mark.parametrize(
    ("rows", "files"),
    [(1, 1), (60_000, 1), (RECORDS_PER_PARTITION, 1), (RECORDS_PER_PARTITION + 1, 2),
     (3 * RECORDS_PER_PARTITION, 3)],
)  # fmt: skip
def test_files_per_batch_follow_the_source_split(rows: int, files: int) -> None:
    assert synthetic_files_per_batch(rows) == files
    assert files == len(split_range(0, rows, RECORDS_PER_PARTITION))
