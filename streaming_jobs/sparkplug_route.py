"""A Sparkplug route (:mod:`.routes`, ``payload_format = "sparkplug"``): the route's messages of
each micro-batch decoded on the driver into the rows the source gives with ``payloadFormat``
``sparkplug`` (:mod:`connector.spark.reader.sparkplug_schema`), which the route's plan then
splits into metrics, events and dead letters as a Sparkplug job does.

The rule (decision 37, for a route): Sparkplug state is a fold of the stored messages in
order. A batch's messages of the route are decoded per receiver in WAL offset order from the
state after the query's previous batch that had any, and the state after the batch is stored
beside the WAL (:data:`STATE_PREFIX` plus a digest of the route's table, one atomic write)
before any table's commit. Spark replays a batch with the same offsets after a crash, so the
replay decodes from the same stored state to the same rows. The file keeps the states after
the query's last two such batches: the one a replay starts from and the newest; a new query
(new checkpoint) starts from an empty state, as does a route added to a running job (its
aliases resolve from the next birth: docs/ingest-job.md, "Routes").
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from connector.options.source import typed_option
from connector.spark.reader.sparkplug_schema import ARROW_SCHEMA, SCHEMA_DDL, to_record_batch
from connector.sparkplug.messages import Message, decode_messages
from connector.sparkplug.state import SparkplugState
from connector.wal.opening import read_sidecar, write_sidecar

log = logging.getLogger(__name__)

STATE_PREFIX = "sparkplug-route-"
"""Beside the WAL: ``sparkplug-route-<digest of the table>.json``, ``{"query", "batches"}``."""
KEPT_BATCHES = 2
STORED_COLUMNS = ("topic", "payload", "qos", "timestamp", "offset", "receiver")
"""What decoding needs of each message of the route."""

__all__ = ["SCHEMA_DDL", "RouteStates", "decode_batch"]


class RouteStates:
    """The stored Sparkplug states of one route's table (module docstring)."""

    def __init__(self, wal_path: str, table: str, reorder_timeout: float | None) -> None:
        self.wal_path = wal_path
        digest = hashlib.sha256(table.encode()).hexdigest()[:16]
        self.name = f"{STATE_PREFIX}{digest}.json"
        seconds = typed_option({}, "sparkplugReorderTimeout")
        timeout = seconds if reorder_timeout is None else reorder_timeout
        self.reorder_timeout_us = round(timeout * 1_000_000)

    def earlier(self, query: str, batch_id: int) -> list[Any]:
        """The stored entries ``[batch id, states]`` of ``query`` before batch ``batch_id``,
        oldest first (one read of the file)."""
        return sorted((b for b in self._batches(query) if b[0] < batch_id), key=lambda b: b[0])

    def before(self, earlier: list[Any]) -> dict[int, SparkplugState]:
        """The states by receiver after the newest of ``earlier`` (:meth:`earlier`)."""
        states: dict[int, SparkplugState] = {}
        for receiver, state in (earlier[-1][1] if earlier else {}).items():
            states[int(receiver)] = SparkplugState.from_json(json.dumps(state))
            states[int(receiver)].reorder_timeout_us = self.reorder_timeout_us
        return states

    def store(
        self, query: str, batch_id: int, earlier: list[Any], states: dict[int, SparkplugState]
    ) -> None:
        """Keep the states after batch ``batch_id`` with the newest of ``earlier``."""
        entry = [batch_id, {str(r): json.loads(s.to_json()) for r, s in states.items()}]
        kept = [*earlier[-(KEPT_BATCHES - 1) :], entry]
        record = {"query": query, "batches": kept}
        write_sidecar(self.wal_path, self.name, json.dumps(record, separators=(",", ":")).encode())

    def new_state(self) -> SparkplugState:
        return SparkplugState(self.reorder_timeout_us)

    def _batches(self, query: str) -> list[Any]:
        try:
            raw = read_sidecar(self.wal_path, self.name)
            record = None if raw is None else json.loads(raw)
        except (OSError, ValueError) as exc:
            log.warning("the Sparkplug state of a route, %s, cannot be read: %s", self.name, exc)
            return []
        if record is None or record.get("query") != query:
            return []
        return list(record["batches"])


def decode_batch(messages: DataFrame, states: RouteStates, query: str, batch_id: int) -> DataFrame:
    """The Sparkplug rows of ``messages`` (the route's rows of batch ``batch_id``, the
    source's MQTT columns), decoded on the driver from the stored states; the states after
    them stored before this returns."""
    stored = messages.select(*STORED_COLUMNS).toArrow()
    spark = messages.sparkSession
    if stored.num_rows == 0:
        return spark.createDataFrame([], SCHEMA_DDL)
    stored = stored.sort_by([("receiver", "ascending"), ("offset", "ascending")])
    earlier = states.earlier(query, batch_id)
    before = states.before(earlier)
    batches: list[pa.RecordBatch] = []
    for receiver in pc.unique(stored.column("receiver")).to_pylist():
        part = stored.filter(pc.equal(stored.column("receiver"), receiver))
        state = before.setdefault(receiver, states.new_state())
        rows = decode_messages(_messages(part), state, receiver)
        batches.append(to_record_batch(rows))
    states.store(query, batch_id, earlier, before)
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    return spark.createDataFrame(table, SCHEMA_DDL)


def _messages(part: pa.Table) -> list[Message]:
    """The stored messages of one receiver's rows, in offset order."""
    columns = [
        part.column("topic").to_pylist(),
        part.column("payload").to_pylist(),
        part.column("qos").to_pylist(),
        part.column("timestamp").cast(pa.int64()).to_pylist(),
        part.column("offset").to_pylist(),
    ]
    return [Message(*values) for values in zip(*columns, strict=True)]
