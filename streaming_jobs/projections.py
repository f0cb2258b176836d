"""Column lists built once per Spark context instead of once per micro-batch.

Each ``Column`` PySpark builds (``F.col``, ``alias``, ``when``, ...) is one or more Py4J round
trips to the driver's JVM. ``decode`` and ``table_rows`` build the same dozens of expressions
for every micro-batch, a measurable part of each batch (bench/REPORT.md). Expressions do not
depend on the frame they are applied to, so they are built once and kept. In classic PySpark
the list is also handed to the JVM once, as a Scala ``Seq``, and each ``select`` is a single
call; elsewhere (Spark Connect, whose columns live in Python) ``select`` takes the kept columns
as they are.

Everything kept belongs to one ``SparkContext``: a new context (after ``spark.stop()``) starts
an empty cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame

if TYPE_CHECKING:
    from pyspark import SparkContext


class Projections:
    """Named column lists, each built on first use in a Spark context."""

    def __init__(self) -> None:
        self._context: SparkContext | None = None
        self._columns: dict[str, list[Column]] = {}
        self._sequences: dict[str, Any] = {}

    def columns(
        self, frame: DataFrame, name: str, build: Callable[[], list[Column]]
    ) -> list[Column]:
        """The columns ``build`` returns, built once per Spark context of ``frame``."""
        context = getattr(frame.sparkSession, "_sc", None)
        if context is not self._context:
            self._context = context
            self._columns.clear()
            self._sequences.clear()
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = build()
        return found

    def select(self, frame: DataFrame, name: str, build: Callable[[], list[Column]]) -> DataFrame:
        """``frame.select(*columns)`` with the kept columns ``name``."""
        columns = self.columns(frame, name, build)
        jdf = getattr(frame, "_jdf", None)
        if jdf is None or self._context is None:
            return frame.select(*columns)
        sequence = self._sequences.get(name)
        if sequence is None:
            try:
                from pyspark.sql.classic.column import _to_java_column, _to_seq
            except ImportError:  # another PySpark layout: the public call does the same
                return frame.select(*columns)
            sequence = self._sequences[name] = _to_seq(self._context, columns, _to_java_column)
        return type(frame)(jdf.select(sequence), frame.sparkSession)
