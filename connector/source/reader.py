"""The ``DataSourceStreamReader`` of the ``mqtt`` source: WAL offsets as Spark offsets.

Offsets are ``{"wal": <WAL identity>, "offset": <sequence number>}``; a batch [a, b) is the
WAL records a <= offset < b. The identity lets a checkpoint detect a wiped or foreign WAL,
handled by ``failOnDataLoss`` like the Kafka source.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from connector.wal import WalDataLossError, WalReader, decode_blob, encode_range

from .options import SourceOptions
from .receiver import Receiver
from .schema import to_record_batches

log = logging.getLogger(__name__)

MIN_RECORDS_PER_SPLIT = 20_000
"""Below this many records a batch is not split further (task overhead dominates)."""


class DataLossError(RuntimeError):
    """The checkpoint refers to WAL records that no longer exist (``failOnDataLoss``)."""


@dataclass(frozen=True, slots=True)
class MqttPartition(InputPartition):
    """WAL records [start, end) of one WAL; ``blob`` carries them when shipped inline."""

    wal_path: str
    identity: str
    start: int
    end: int
    blob: bytes | None = None


def split_range(start: int, end: int, per_partition: int, min_split: int) -> list[tuple[int, int]]:
    """Cut [start, end) into near-equal ranges of at most ``per_partition`` records, using at
    least two when there are ``2 * min_split`` records or more."""
    count = end - start
    if count <= 0:
        return []
    parts = max(math.ceil(count / per_partition), min(2, count // min_split), 1)
    bounds = [start + (count * i) // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


class MqttStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Drives one receiver. Offsets, partitions and commits run in Spark's driver-side
    streaming source process; ``read`` runs in Spark tasks.

    Spark also builds a reader in a planning process only to pickle ``read``: so the receiver
    starts lazily, on the first offset call, and is never pickled (nor are the options, which
    hold the password).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._receiver: Receiver | None = None
        self._target: int | None = None

    def __getstate__(self) -> dict:
        return {"options": None, "_receiver": None, "_target": None}

    @property
    def receiver(self) -> Receiver:
        if self._receiver is None:
            receiver = Receiver(self.options)
            receiver.start()
            self._receiver = receiver
            log.info("mqtt source started: %s", self.options.redacted())
        return self._receiver

    @property
    def identity(self) -> str:
        return self.receiver.wal.identity

    # ------------------------------------------------------------------ offsets

    def _offset(self, value: int) -> dict:
        return {"wal": self.identity, "offset": value}

    def initialOffset(self) -> dict:
        self.receiver.check()
        return self._offset(self.receiver.committed)

    def _resolve(self, offset: dict) -> int:
        """The position ``offset`` names in this WAL, applying the data-loss policy."""
        wal = self.receiver.wal
        value = int(offset.get("offset", 0))
        problem = None
        if offset.get("wal") != self.identity:
            problem = (
                f"the checkpoint's offsets belong to WAL {offset.get('wal')!r} but "
                f"{self.options.wal_path} holds WAL {self.identity!r} (wiped or replaced): "
                "messages received by the previous WAL and not yet processed are lost"
            )
            value = wal.first_offset
        elif value < wal.first_offset:
            problem = (
                f"WAL records [{value}, {wal.first_offset}) in {self.options.wal_path} were "
                "deleted before the query processed them"
            )
            value = wal.first_offset
        elif value > wal.next_offset:
            raise DataLossError(
                f"the checkpoint is at WAL offset {value} but {self.options.wal_path} ends at "
                f"{wal.next_offset}: the WAL lost records the query already saw; restore the "
                "WAL or start the query with a new checkpoint"
            )
        if problem is not None:
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    problem + ". Set option failOnDataLoss=false to continue from the WAL's "
                    "oldest record."
                )
            log.warning("possible data loss: %s; continuing from offset %d", problem, value)
        return value

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self.receiver.check()
        first = self._resolve(start)
        # Spark asks for the next batch only once the previous one is in the sink, so
        # ``start`` is committed. Spark calls ``commit`` only after it has planned a NEW
        # batch: a receiver paused by maxBacklogMessages with everything read already
        # processed would wait for a commit that never comes. Release it here.
        self.receiver.committed_to(first)
        high = self.receiver.wal.next_offset
        if self._target is not None:
            high = min(high, self._target)
        if isinstance(limit, ReadMaxRows):
            high = min(high, first + limit.max_rows)
        return self._offset(max(first, high))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        return self._offset(self.receiver.wal.next_offset)

    def prepareForTriggerAvailableNow(self) -> None:
        """Wait until the broker's queue for this session is drained (no message for
        ``availableNowIdleTimeout``), at most ``availableNowMaxWait``, then fix the target: with
        steady traffic there is no drained moment, and the run takes what arrived by then."""
        self.receiver.wait_idle(
            self.options.available_now_idle_timeout, timeout=self.options.available_now_max_wait
        )
        self._target = self.receiver.wal.next_offset
        log.info("Trigger.AvailableNow: reading up to WAL offset %d", self._target)

    # ------------------------------------------------------------------ batches

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self.receiver.check()
        first = self._resolve(start)
        last = int(end["offset"])
        if end.get("wal") != self.identity:
            raise DataLossError(f"end offset {end} does not belong to WAL {self.identity!r}")
        path = self.options.wal_path
        inline = self.options.partition_data == "inline"
        return [
            MqttPartition(path, self.identity, a, b, encode_range(path, a, b) if inline else None)
            for a, b in split_range(
                first, last, self.options.records_per_partition, MIN_RECORDS_PER_SPLIT
            )
        ]

    def read(self, partition: InputPartition) -> Iterator:
        assert isinstance(partition, MqttPartition)
        if partition.blob is not None:
            columns = decode_blob(partition.blob)
        else:
            reader = WalReader(partition.wal_path)
            if reader.identity != partition.identity:
                raise WalDataLossError(
                    partition.wal_path,
                    partition.start,
                    partition.end,
                    f"the WAL at this path is {reader.identity!r}, not {partition.identity!r}",
                )
            columns = reader.read(partition.start, partition.end)
        if len(columns) != partition.end - partition.start:
            raise WalDataLossError(
                partition.wal_path,
                partition.start,
                partition.end,
                f"expected {partition.end - partition.start} records, found {len(columns)}",
            )
        yield from to_record_batches(columns)

    def commit(self, end: dict) -> None:
        if end.get("wal") == self.identity:
            self.receiver.committed_to(int(end["offset"]))

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None
