"""The ``DataSourceStreamReader`` of the ``mqtt`` source: WAL offsets as Spark offsets.

With one receiver, offsets are ``{"wal": <WAL identity>, "offset": <sequence number>}``; a
batch [a, b) is the WAL records a <= offset < b. With ``receivers`` = N > 1 an offset holds one
such position per shard (``{"shards": [...]}``, see :mod:`connector.receiver.shards`) and a
batch is one range per shard. The identity lets a checkpoint detect a wiped or foreign WAL,
handled by ``failOnDataLoss`` (per shard) like the Kafka source, unless the checkpoint's
position is final (:class:`connector.receiver.shards.Position`: a ``Trigger.AvailableNow`` run
left nothing behind in that WAL).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from connector.options.source import SourceOptions
from connector.receiver.shard_handles import LocalShard, ShardProcess, ShardStatus, start_processes
from connector.receiver.shard_worker import TERMINATED_EXIT_STATUS
from connector.receiver.shards import (
    Position,
    check_wal_layout,
    decode_offset,
    encode_offset,
    fair_split,
)
from connector.spark.reader.progress_report import progress_report
from connector.spark.reader.sparkplug_plan import SparkplugStates
from connector.spark.reader.sparkplug_schema import to_record_batches as sparkplug_batches
from connector.spark.schema import to_record_batches
from connector.spark.user_errors import one_line
from connector.sparkplug.messages import decode_messages, messages_of
from connector.sparkplug.state import SparkplugState
from connector.wal import WalDataLossError, decode_blob
from connector.wal.opening import open_reader

log = logging.getLogger(__name__)

FIRST_BATCH_IDLE = 0.1
"""``firstBatchWait``: seconds without a message after which the first burst counts as over."""

SOURCE_RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
"""The module PySpark runs (``python -m``) as the driver-side process of a Python streaming
source; its main loop calls the reader's ``stop()`` in a ``finally``."""


class SourceTerminated(BaseException):
    """SIGTERM reached the streaming source runner: unwinds its main thread into the runner's
    ``finally: reader.stop()`` (a BaseException, so that no ``except Exception`` holds it)."""


def in_source_runner() -> bool:
    """Whether this is the main thread of PySpark's streaming source runner process."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return (
        getattr(spec, "name", None) == SOURCE_RUNNER_MODULE
        and threading.current_thread() is threading.main_thread()
    )


@dataclass(frozen=True, slots=True)
class MqttPartition(InputPartition):
    """WAL records [start, end) of one WAL (of receiver ``receiver``); ``blob`` carries them
    when shipped inline; ``mqtt5``: the rows have the ``properties`` column."""

    wal_path: str
    identity: str
    start: int
    end: int
    blob: bytes | None = None
    receiver: int = 0
    mqtt5: bool = False
    sparkplug_state: str | None = None
    """``payloadFormat`` ``sparkplug``: the state before ``start``, as JSON (the rows are
    Sparkplug metrics, :mod:`.sparkplug_plan`)."""


def split_range(start: int, end: int, per_partition: int) -> list[tuple[int, int]]:
    """Cut [start, end) into the fewest near-equal ranges of at most ``per_partition`` records.

    Every task pays a fixed cost (a Python worker round, a Parquet file, an entry in the Delta
    commit) that a second task on the same cores does not win back while the receiver and a
    colocated broker need CPU too, so a batch is split only by ``recordsPerPartition``
    (decision 30)."""
    count = end - start
    if count <= 0:
        return []
    parts = math.ceil(count / per_partition)
    bounds = [start + (count * i) // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


class MqttStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Drives the query's receivers. Offsets, partitions and commits run in Spark's
    driver-side streaming source process; ``read`` runs in Spark tasks.

    Spark also builds a reader in a planning process only to pickle ``read``: so the receivers
    start lazily, on the first offset call, and are never pickled (nor are the options, which
    hold the password). With ``receivers`` = 1 the receiver is a thread of this process; with
    more, each is a process of its own (:mod:`connector.receiver.shard_worker`).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._shards: Sequence[LocalShard | ShardProcess] | None = None
        self._targets: list[int] | None = None
        """``Trigger.AvailableNow``: each shard's offset when its receiver froze."""
        self._handed_over: set[tuple[int, str | None]] = set()
        """(shard, old WAL) pairs whose final position ``_resolve`` took over (logged once)."""
        self._available_now = False
        """``prepareForTriggerAvailableNow`` was called: freeze at the first real offset call."""
        self._unfinalized: set[tuple[str | None, int]] | None = None
        """The final (WAL, offset) positions of the run's start, once this process had Spark
        log them as not final (``latestOffset``); None before its first offset call."""
        self._batch_ends: list[int] | None = None
        """Each shard's offset the latest ``latestOffset`` planned up to (the progress report's
        ``batchEnd``)."""
        self._last_batch_at: float | None = None
        self._settled = False
        self._sigterm_handled = False
        self._previous_sigterm: Callable[[int, FrameType | None], Any] | int | None = None
        self._terminated = False
        self._stopping = False
        self._sparkplug_states: dict[int, SparkplugStates] = {}
        """``payloadFormat`` ``sparkplug``: the states of each shard's WAL, by shard."""

    def __getstate__(self) -> dict[str, Any]:
        return {
            "options": None,
            "_shards": None,
            "_targets": None,
            "_handed_over": set(),
            "_available_now": False,
            "_unfinalized": None,
            "_last_batch_at": None,
            "_settled": False,
            "_sigterm_handled": False,
            "_previous_sigterm": None,
            "_terminated": False,
            "_stopping": False,
            "_sparkplug_states": {},
        }

    @property
    def shards(self) -> Sequence[LocalShard | ShardProcess]:
        if self._shards is None:
            check_wal_layout(self.options)
            self._stop_on_sigterm()
            if self.options.receivers == 1:
                self._shards = [LocalShard(self.options)]
            else:
                self._shards = start_processes(self.options)
            log.info("mqtt source started: %s", self.options.redacted())
            if not self.options.wal_path_given:
                log.warning(
                    "option 'walPath' not given: the WAL is in the local directory %s, which "
                    "does not move with the checkpoint; a driver on another machine finds "
                    "none there and the query fails (docs/wal-storage.md): give 'walPath' "
                    "next to the checkpoint, on storage that lasts as long as it",
                    self.options.wal_path,
                )
        return self._shards

    @property
    def identity(self) -> str:
        """The WAL identity of the first (with one receiver: the only) shard."""
        return self.shards[0].identity

    # ------------------------------------------------------------------ offsets

    def _positions(self, offset: dict[str, Any]) -> list[Position]:
        """Decode a Spark offset; a different receiver count fails before anything starts."""
        return decode_offset(offset, self.options.receivers)

    def _where(self, shard: LocalShard | ShardProcess) -> str:
        if self.options.receivers == 1:
            return self.options.wal_path
        return f"{shard.wal_path} (receiver {shard.index})"

    def _resolve(self, shard: LocalShard | ShardProcess, at: Position, status: ShardStatus) -> int:
        """The position ``at`` names in the shard's WAL, applying the data-loss policy; a
        final position in another WAL hands over to this one
        (:class:`connector.receiver.shards.Position`)."""
        value = at.offset
        where = self._where(shard)
        problem = None
        handed = at.final or (at.wal, at.offset) in (self._unfinalized or ())
        if handed and at.wal != shard.identity:
            if (shard.index, at.wal) not in self._handed_over:
                self._handed_over.add((shard.index, at.wal))
                log.info(
                    "%s holds WAL %r, not WAL %r of the checkpoint: its position %d there is "
                    "final (that WAL stored nothing past it, and every message it acknowledged "
                    "is in a committed batch), so nothing is lost; continuing from offset %d",
                    where,
                    shard.identity,
                    at.wal,
                    at.offset,
                    status.first,
                )
            return status.first
        if at.wal != shard.identity:
            problem = (
                f"the checkpoint's offsets belong to WAL {at.wal!r} but {where} holds WAL "
                f"{shard.identity!r} (wiped or replaced): messages received by the previous WAL "
                "and not yet processed are lost"
            )
            value = status.first
        elif value < status.first:
            problem = (
                f"WAL records [{value}, {status.first}) in {where} were deleted before the "
                "query processed them"
            )
            value = status.first
        elif value > status.next:
            raise WalDataLossError(
                shard.wal_path,
                status.next,
                value,
                f"the checkpoint is at WAL offset {value} but {where} ends at {status.next}: "
                "the WAL lost records the query already saw; restore the WAL or start the query "
                "with a new checkpoint",
            )
        if problem is not None:
            if self.options.fail_on_data_loss:
                raise WalDataLossError(
                    shard.wal_path,
                    at.offset,
                    status.first if at.wal == shard.identity else None,
                    problem + ". Set option failOnDataLoss=false to continue from the WAL's "
                    "oldest record.",
                )
            log.warning("possible data loss: %s; continuing from offset %d", problem, value)
        return value

    @one_line
    def initialOffset(self) -> dict[str, Any]:
        positions = []
        for shard in self.shards:
            shard.check()
            positions.append(Position(shard.identity, shard.status().committed))
        return encode_offset(positions)

    def _hold_back(self, available: int) -> bool:
        """``minMessagesPerTrigger``: skip this trigger while fewer messages wait, unless the
        last batch is ``maxTriggerDelay`` old (as Kafka's minOffsetsPerTrigger and
        maxTriggerDelay). Never under Trigger.AvailableNow, which reads up to its target."""
        wanted = self.options.min_messages_per_trigger
        if not wanted or self._targets is not None or available >= wanted:
            return False
        now = time.monotonic()
        if self._last_batch_at is None:
            self._last_batch_at = now
        return available == 0 or now - self._last_batch_at < self.options.max_trigger_delay

    def _settle(self) -> None:
        """``firstBatchWait``: before the run's first batch, wait until the receivers' first
        burst (what the broker queued for the session while no query ran) stops, at most
        ``firstBatchWait`` seconds, so that batch takes the queue instead of the few messages
        stored when Spark first asked. Not under Trigger.AvailableNow, which waits already."""
        self._settled = True
        wait = self.options.first_batch_wait
        if not wait or self._targets is not None:
            return
        self._wait_idle(FIRST_BATCH_IDLE, wait)

    @one_line
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        starts = self._positions(start)  # a changed receiver count fails before any starts
        if self._unfinalized is None:
            self._unfinalized = {(p.wal, p.offset) for p in starts if p.final}
            if self._unfinalized:
                # Before any receiver connects: once Spark logged this offset, a run that
                # acknowledges messages and then loses its WAL leaves a position that is not
                # final, and the loss is reported (Position's rule).
                log.info("the run starts at a final position: logging it as not final first")
                return encode_offset([Position(p.wal, p.offset) for p in starts])
        if self._available_now and self._targets is None:
            self._freeze_at_targets()
        if not self._settled:
            self._settle()
        firsts, highs = [], []
        for index, shard in enumerate(self.shards):
            shard.check()
            first = self._resolve(shard, starts[index], shard.status())
            # Spark asks for the next batch only once the previous one is in the sink, so
            # ``start`` is committed. Spark calls ``commit`` only after it has planned a NEW
            # batch: a receiver paused by maxBacklogMessages with everything read already
            # processed would wait for a commit that never comes. Release it here.
            high = shard.commit(first).next
            if self._targets is not None:
                high = min(high, self._targets[index])
            firsts.append(first)
            highs.append(max(first, high))
        if isinstance(limit, ReadMaxRows):
            takes = fair_split([h - f for f, h in zip(firsts, highs, strict=True)], limit.max_rows)
            highs = [f + t for f, t in zip(firsts, takes, strict=True)]
        if self._hold_back(sum(highs) - sum(firsts)):
            highs = firsts
        elif sum(highs) > sum(firsts):
            self._last_batch_at = time.monotonic()
        targets = self._targets
        ends = [
            Position(s.identity, h, final=targets is not None and h == targets[i])
            for i, (s, h) in enumerate(zip(self.shards, highs, strict=True))
        ]
        if all((e.wal, e.offset) == (a.wal, a.offset) for e, a in zip(ends, starts, strict=True)):
            self._batch_ends = [p.offset for p in starts]
            return encode_offset(starts)  # nothing new: no batch (a flag alone is no new data)
        self._batch_ends = highs
        return encode_offset(ends)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        return ReadAllAvailable()

    @one_line
    def reportLatestOffset(self) -> dict[str, Any]:
        """The WAL's high-water mark, and the receivers' delivery counters summed (this run):
        the progress report's ``latestOffset``, which is never stored in the checkpoint.
        Receivers that have not started yet are not started here (see ``latestOffset``)."""
        if self._shards is None:
            return progress_report({}, None)
        statuses = [s.status() for s in self.shards]
        offset = encode_offset(
            [Position(s.identity, st.next) for s, st in zip(self.shards, statuses, strict=True)]
        )
        return progress_report(offset, statuses, self._batch_ends)

    @one_line
    def prepareForTriggerAvailableNow(self) -> None:
        """Note the trigger; the wait and the freeze happen at the run's first offset call
        that plans data (``_freeze_at_targets``), after a final start position was logged as
        not final (``latestOffset``)."""
        self._available_now = True

    def _freeze_at_targets(self) -> None:
        """Wait until the broker's queue for every receiver's session is drained (no message
        for ``availableNowIdleTimeout``), at most ``availableNowMaxWait``, then freeze every
        receiver (``Receiver.freeze``: it stores and acknowledges nothing more, and
        disconnects) and take its WAL's next offset as the shard's target. With steady
        traffic there is no drained moment: the run takes what was stored by then, and the
        broker keeps the rest for the next run. The batch that reaches a shard's target ends
        at a final position (:class:`connector.receiver.shards.Position`). Receiver processes
        wait and freeze in parallel."""
        options = self.options
        self._wait_idle(options.available_now_idle_timeout, options.available_now_max_wait)
        for shard in self.shards:
            shard.begin_freeze()
        statuses = [shard.end_freeze() for shard in self.shards]
        self._targets = [status.next for status in statuses]
        log.info("Trigger.AvailableNow: receivers frozen at WAL offset(s) %s", self._targets)

    def _wait_idle(self, idle: float, timeout: float) -> list[ShardStatus]:
        """Every shard's status once its receiver went ``idle`` seconds without a message (or
        ``timeout`` passed); receiver processes wait in parallel."""
        for shard in self.shards:
            shard.begin_wait_idle(idle, timeout)
        return [shard.end_wait_idle() for shard in self.shards]

    # ------------------------------------------------------------------ batches

    @one_line
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        starts, ends = self._positions(start), self._positions(end)
        if all((a.wal, a.offset) == (b.wal, b.offset) for a, b in zip(starts, ends, strict=True)):
            return []  # a position's mark changed, no record (``latestOffset``)
        inline = self.options.partition_data == "inline"
        parts: list[InputPartition] = []
        for index, shard in enumerate(self.shards):
            shard.check()
            first = self._resolve(shard, starts[index], shard.status())
            if ends[index].wal != shard.identity:
                raise WalDataLossError(
                    shard.wal_path,
                    starts[index].offset,
                    ends[index].offset,
                    f"the batch's end offset belongs to WAL {ends[index].wal!r} but "
                    f"{self._where(shard)} holds WAL {shard.identity!r}",
                )
            path = shard.wal_path
            wal = open_reader(path) if inline else None
            ranges = split_range(first, ends[index].offset, self.options.records_per_partition)
            states: list[str | None] = [None] * len(ranges)
            if self.options.sparkplug:
                states = list(self._sparkplug(shard).plan(ranges, shard.status().first))
            parts.extend(
                MqttPartition(
                    path,
                    shard.identity,
                    a,
                    b,
                    wal.encode_range(a, b) if wal is not None else None,
                    index,
                    self.options.mqtt5,
                    state,
                )
                for (a, b), state in zip(ranges, states, strict=True)
            )
        return parts

    def _sparkplug(self, shard: LocalShard | ShardProcess) -> SparkplugStates:
        """The Sparkplug states of ``shard``'s WAL (kept for the query's lifetime)."""
        found = self._sparkplug_states.get(shard.index)
        if found is None or found.identity != shard.identity:
            found = self._sparkplug_states[shard.index] = SparkplugStates(
                shard.wal_path,
                shard.identity,
                round(self.options.sparkplug_reorder_timeout * 1_000_000),
            )
        return found

    @one_line
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MqttPartition)
        if partition.blob is not None:
            columns = decode_blob(partition.blob)
        else:
            reader = open_reader(partition.wal_path)
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
        if partition.sparkplug_state is not None:
            state = SparkplugState.from_json(partition.sparkplug_state)
            messages = messages_of(
                columns.topics,
                columns.payloads,
                columns.qos,
                columns.timestamps_us,
                partition.start,
            )
            rows = decode_messages(messages, state, partition.receiver)
            yield from sparkplug_batches(rows)
            return
        yield from to_record_batches(columns, receiver=partition.receiver, mqtt5=partition.mqtt5)

    @one_line
    def commit(self, end: dict[str, Any]) -> None:
        ends = self._positions(end)
        for shard, position in zip(self.shards, ends, strict=True):
            if position.wal == shard.identity:
                if self.options.sparkplug:  # before the WAL deletes the records below it
                    self._sparkplug(shard).commit(position.offset, shard.status().first)
                shard.commit(position.offset)

    # ------------------------------------------------------------------ stopping

    def _stop_on_sigterm(self) -> None:
        """In Spark's streaming source runner, make SIGTERM stop the receivers in order.

        Spark stops a Python source (``query.stop()``, the end of an AvailableNow run, a job
        that exits) with ``PythonStreamingSourceRunner.stop()``, which destroys the runner
        process (SIGTERM) before closing its socket. By default Python then dies at once: the
        runner's ``finally: reader.stop()`` never runs and the broker sees the connection
        close without DISCONNECT. This handler unwinds the main thread into that ``finally``
        instead; ``stop()`` then ends the process (docs/architecture.md, decision 32)."""
        if self._sigterm_handled or not in_source_runner():
            return
        self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._sigterm_handled = True

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._terminated = True
        if not self._stopping:  # a stop under way ends the process when it is done
            raise SourceTerminated("SIGTERM: the query stopped the source")

    def stop(self) -> None:
        """Stop every receiver: DISCONNECT, WAL closed. After SIGTERM (see
        ``_stop_on_sigterm``) the process then exits, before the runner reports the signal
        to a JVM that is no longer listening."""
        self._stopping = True
        shards, self._shards = self._shards, None
        errors = []
        try:
            for shard in shards or ():
                try:
                    shard.stop()
                except Exception as exc:  # stop the others first
                    errors.append(exc)
        finally:
            self._stopping = False
            if self._sigterm_handled:
                previous = self._previous_sigterm
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
                self._sigterm_handled = False
            if self._terminated:
                self._exit_terminated(errors)
        if errors:
            raise errors[0]

    @staticmethod
    def _exit_terminated(errors: list[Exception]) -> None:
        for exc in errors:
            log.warning("stopping the mqtt source: %s", exc)
        log.info("mqtt source stopped on SIGTERM")
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(TERMINATED_EXIT_STATUS)
