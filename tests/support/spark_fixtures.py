"""The Spark fixtures of every test directory, a pytest plugin (``tests/conftest.py`` names it in
``pytest_plugins``): the run's one local Spark session, and the directories of one query.

One Spark session serves the whole run (it takes seconds to start and warm up), whichever
directories' tests ask for it; each test gets its own WAL, checkpoint and table under its
``tmp_path``. PySpark is imported only when a test asks for the session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.spark_streams import StreamDirs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one local Spark session (local[2], Delta) of the test run."""
    from pyspark import SparkContext

    from streaming_jobs.spark_session import local_spark

    session = local_spark("connector-spark-tests", **{"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        if SparkContext._active_spark_context is not None:  # a test may have stopped it
            for query in session.streams.active:
                with contextlib.suppress(Exception):  # best effort at the end of the run
                    query.stop()
            session.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> StreamDirs:
    """WAL, checkpoint and table paths for one query, under the test's tmp_path."""
    return StreamDirs.under(tmp_path / "stream")
