"""Batches shaped like the ``mqtt`` source's rows, made in the test run's Spark session, for
tests of the ingest job's decoding and writers without a query; and the payload schema those
tests decode with."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from connector.spark.schema import SCHEMA_DDL

SCHEMA = "seq BIGINT NOT NULL, temp DOUBLE, status STRING"
"""The ``--schema`` of the JSON payloads in these batches."""
RECEIVED = dt.datetime(2026, 3, 1, 23, 59, 59, tzinfo=dt.UTC)
"""The receive time of every row."""


def source_rows(
    spark: SparkSession,
    payloads_: Sequence[bytes],
    topic: str = "plant/s1/d1/telemetry",
    *,
    first_offset: int = 0,
    receiver: int = 0,
) -> DataFrame:
    """Rows shaped like the ``mqtt`` source's, one per payload, offsets from ``first_offset``
    on in ``receiver``'s WAL."""
    rows = [
        (topic, payload, 1, False, False, i + 1, RECEIVED, first_offset + i, receiver)
        for i, payload in enumerate(payloads_)
    ]
    return spark.createDataFrame(rows, SCHEMA_DDL)
