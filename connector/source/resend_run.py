"""Recognise a broker's in-order resend of QoS 1 messages already in the WAL.

MQTT 3.1.1 section 4.4: after a reconnect with a session present the broker resends every
QoS 1 PUBLISH it has not seen acknowledged, with DUP=1 (section 3.3.1.1), and section 4.6
has it keep the order it sent them in. On one connection the receiver stores and PUBACKs
messages in the broker's send order, and the broker processes PUBACKs in order, so when a
connection is lost the broker's in-flight list is a suffix of what it sent and what the
receiver stored is a prefix of it. The resend on the next connection is therefore: the QoS 1
records stored on earlier connections from some offset ``j`` up to ``conn_start`` (the WAL's
``next_offset`` when this connection came up), then messages the receiver never got.

Rule, per connection, decided per socket read (:meth:`ResendRun.classify` takes the DUP=1
QoS 1 messages of one read, in order, as (packet id, record digest) pairs):

* While a run is active, a message equal (packet id and record digest) to the stored QoS 1
  record at the cursor is a redelivery; the cursor moves to the next stored QoS 1 record
  with a packet id. When it reaches ``conn_start`` the run is over: what follows was never
  stored. A mismatch before ``conn_start`` means the broker did not resend in order: one
  WARNING per connection, the run ends, and the message is tested as below (one more
  search is allowed).
* Otherwise a message equal to the latest stored message with its packet id (the WAL's QoS
  state, the cheap first test) is a redelivery.
* Otherwise, once per connection (and again after a mismatch), the WAL is searched backwards
  from ``conn_start`` for the latest QoS 1 record with that packet id and digest. A hit at
  ``j`` is a redelivery only when the next :data:`CONFIRM` DUP=1 QoS 1 messages equal the
  stored QoS 1 records that follow ``j``, in order (or, when fewer than
  :data:`CONFIRM` lie between ``j`` and ``conn_start``, all of them do): then the message
  and those that confirmed it are redeliveries, and the run goes on after them. Otherwise
  (no hit, or a mismatch) the message is new and the search counts as done; older
  candidates are not looked for. When the read ends before the hit is confirmed, the
  verdict waits (``classify(..., final=False)`` returns None and changes nothing): the
  receiver reads on and asks again with the longer list, and only a final call, when no
  further resend came, stores the unconfirmed hit as new.

Packet ids are reused (every 65,535 messages, sooner for a broker that picks the lowest free
id) and sensor payloads repeat, so the WAL can hold an older message equal to a new one that
was lost in flight with a dropped connection; dropping it on a single hit would lose it. With
the confirmation, a false drop needs 1 + :data:`CONFIRM` consecutive resends equal to
consecutive stored messages (packet id, topic and payload), which only a stream of identical
messages produces, and there no digest-based rule can tell messages apart. An unconfirmed
hit is stored: at worst a duplicate, never a loss.

This catches redeliveries whose packet id a later stored message reused, which a broker
with more than 65,535 messages in flight for one session produces (Mosquitto 2.0.11). Only
what the WAL still holds can be matched: segments deleted after Spark committed them are
gone, and a resend of their messages falls back to the latest-digest test. Memory stays
flat: the WAL is read in chunks of at most :data:`CHUNK_RECORDS` records and about
:data:`CHUNK_BYTES` bytes of payload, never kept whole.
"""

from __future__ import annotations

import logging
import zlib
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import Protocol

from connector.wal import WalColumns, WalDataLossError, WalReader
from connector.wal.records import FLAG_HAS_ID, FLAG_QOS_MASK, digest_seed

log = logging.getLogger(__name__)

CONFIRM = 4
"""Resends after a search hit that must equal the stored QoS 1 records following it before the
hit counts as a redelivery (fewer only up to ``conn_start``)."""
CHUNK_RECORDS = 65_536
"""Most records read from the WAL at once (by default)."""
CHUNK_BYTES = 16 * 1024 * 1024
"""About how many payload bytes one read of the WAL may bring in (sizes the next chunk)."""
_FIRST_CHUNK = 4_096
_QOS1_WITH_ID = FLAG_HAS_ID | 1
_QOS1_MASK = FLAG_HAS_ID | FLAG_QOS_MASK


class StoredLog(Protocol):
    """What the rule needs of the WAL writer (:class:`connector.wal.WalWriter` has it)."""

    @property
    def path(self) -> Path: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    def latest_digest(self, message_id: int) -> int | None: ...


_UNDONE_WITHOUT_VERDICT = ("_cursor", "_chunk", "_searched", "_rejected", "matched", "rejected")
"""The state a call that ends without a verdict puts back (the kept search hit stays)."""


class _NeedMore(Exception):
    """The read ended before a search hit was confirmed (a call that is not final)."""


class _Chunk:
    """Records ``[lo, hi)`` of the WAL with flat flags and packet id columns."""

    __slots__ = ("_piece_starts", "_seeds", "columns", "flags", "hi", "lo", "message_ids")

    def __init__(self, columns: WalColumns) -> None:
        self.columns = columns
        self.lo = columns.first_offset
        self.hi = self.lo + len(columns)
        self.flags = columns.flags
        self.message_ids: array = columns.message_id_values
        starts, at = [], 0
        for piece in columns.pieces:
            starts.append(at)
            at += len(piece)
        self._piece_starts = starts
        self._seeds: dict[str, int] = {}

    def payload_bytes(self) -> int:
        return sum(p.payload_ends[p.hi] - p.payload_ends[p.lo] for p in self.columns.pieces)

    def is_qos1(self, i: int) -> bool:
        """Whether row ``i`` (relative to ``lo``) is a QoS 1 record with a packet id."""
        return self.flags[i] & _QOS1_MASK == _QOS1_WITH_ID

    def digest(self, i: int) -> int:
        """record_digest of row ``i`` (relative to ``lo``)."""
        k = bisect_right(self._piece_starts, i) - 1
        piece = self.columns.pieces[k]
        row = piece.lo + i - self._piece_starts[k]
        topic = piece.topic_names[piece.topic_ids[row]]
        seed = self._seeds.get(topic)
        if seed is None:
            seed = self._seeds[topic] = digest_seed(topic.encode("utf-8"))
        ends = piece.payload_ends
        return zlib.crc32(memoryview(piece.payload_data)[ends[row] : ends[row + 1]], seed)

    def holds(self, offset: int, message_id: int, digest: int) -> bool:
        """Whether the record at ``offset`` has this packet id and record digest."""
        i = offset - self.lo
        return self.message_ids[i] == message_id and self.digest(i) == digest

    def rfind(self, message_id: int, digest: int) -> int | None:
        """Offset of the last QoS 1 row with ``message_id`` and ``digest``, None if none."""
        raw = self.message_ids.tobytes()
        pattern = array("H", (message_id,)).tobytes()
        end = len(raw)
        while True:
            pos = raw.rfind(pattern, 0, end)
            if pos < 0:
                return None
            end = pos + 1  # the next match starts before ``pos``
            if pos & 1:  # straddles two ids
                continue
            i = pos >> 1
            if self.is_qos1(i) and self.digest(i) == digest:
                return self.lo + i


class ResendRun:
    """Per-connection state of the in-order resend rule (see the module docstring)."""

    def __init__(
        self,
        wal: StoredLog,
        reader: WalReader | None = None,
        *,
        chunk_records: int = CHUNK_RECORDS,
    ) -> None:
        if chunk_records < 1:
            raise ValueError(f"chunk_records must be positive, got {chunk_records}")
        self.wal = wal
        self.reader = reader if reader is not None else WalReader(wal.path)
        self.conn_start = wal.next_offset
        self.matched = 0
        """Redeliveries recognised by the run or the search (not by the latest digest)."""
        self.searches = 0
        """Backward searches of the WAL (tests and diagnostics)."""
        self.rejected = 0
        """Search hits not confirmed by the resends after them (stored as new messages)."""
        self._cursor: int | None = None
        self._chunk: _Chunk | None = None
        self._searched = False
        self._warned = False
        self._rejected = False
        self._hit: tuple[int, int, int | None] | None = None
        """The last search's (packet id, digest, offset found): a call asked again after
        reading more does not search the WAL again."""
        self._final = True
        self._max = chunk_records
        self._size = min(_FIRST_CHUNK, chunk_records)

    def connection_started(self, next_offset: int) -> None:
        """A connection came up; ``next_offset`` is the WAL's next offset at that moment."""
        self.conn_start = next_offset
        self._end_run()
        self._searched = False
        self._warned = False
        self._rejected = False
        self._hit = None

    @property
    def active(self) -> bool:
        """Whether a run is being followed (the next resend is expected at :attr:`cursor`)."""
        return self._cursor is not None

    @property
    def cursor(self) -> int | None:
        """Offset of the stored record the next in-order resend should equal."""
        return self._cursor

    def classify(self, pairs: list[tuple[int, int]], *, final: bool = True) -> list[bool] | None:
        """Which DUP=1 QoS 1 messages of one socket read are already stored (True: drop).

        ``pairs`` holds (packet id, record digest) of those messages in the order read. Not
        ``final``: None when the pairs end before a search hit is confirmed, with the state
        as before the call; ask again with these pairs and the ones read after them.
        """
        saved = [getattr(self, name) for name in _UNDONE_WITHOUT_VERDICT]
        self._final = final
        try:
            return self._classify(pairs)
        except _NeedMore:
            for name, value in zip(_UNDONE_WITHOUT_VERDICT, saved, strict=True):
                setattr(self, name, value)
            return None

    def _classify(self, pairs: list[tuple[int, int]]) -> list[bool]:
        out: list[bool] = []
        n = len(pairs)
        k = 0
        while k < n:
            message_id, digest = pairs[k]
            cursor = self._cursor
            if cursor is not None:
                chunk = self._chunk_at(cursor)
                if chunk is None:  # truncation deleted the rest of the run
                    self._end_run()
                    out.append(self.wal.latest_digest(message_id) == digest)
                    k += 1
                    continue
                if chunk.holds(cursor, message_id, digest):
                    self.matched += 1
                    self._advance(chunk, cursor - chunk.lo + 1)
                    out.append(True)
                    k += 1
                    continue
                self._mismatch(message_id, cursor)
            if self.wal.latest_digest(message_id) == digest:
                out.append(True)
                k += 1
                continue
            taken = 0 if self._searched else self._search_and_confirm(pairs, k)
            if taken:
                out.extend([True] * taken)
                k += taken
            else:
                out.append(False)
                k += 1
        return out

    # ------------------------------------------------------------------ internals

    def _end_run(self) -> None:
        self._cursor = None
        self._chunk = None

    def _mismatch(self, message_id: int, cursor: int) -> None:
        self._end_run()
        self._searched = False  # the resend went out of order: one more search
        if not self._warned:
            self._warned = True
            log.warning(
                "the broker resent packet id %d out of order: the next resend was expected to "
                "equal the message stored at WAL offset %d (messages stored before offset %d "
                "are being resent); searching the WAL for it",
                message_id,
                cursor,
                self.conn_start,
            )

    def _search_and_confirm(self, pairs: list[tuple[int, int]], k: int) -> int:
        """Search for ``pairs[k]``; on a hit confirmed by the pairs after it, start the run
        after them and return how many pairs are redeliveries (0: ``pairs[k]`` is new)."""
        self._searched = True
        message_id, digest = pairs[k]
        if self.wal.latest_digest(message_id) is None:
            return 0  # no QoS 1 or 2 message was ever stored with this packet id
        hit = self._hit
        if hit is not None and hit[:2] == (message_id, digest):
            found = hit[2]
        else:
            found = self._search(message_id, digest)
            self._hit = (message_id, digest, found)
        if found is None:
            return 0
        taken = self._confirm(found, pairs, k)
        if not taken:
            self._end_run()
            self.rejected += 1
            if not self._rejected:
                self._rejected = True
                log.info(
                    "packet id %d resent with DUP=1 equals the message stored at WAL offset %d, "
                    "but the resends that follow it do not include %d equal to the messages "
                    "stored after that offset: stored as a new message (no further search on "
                    "this connection unless a run goes out of order)",
                    message_id,
                    found,
                    CONFIRM,
                )
            return 0
        self.matched += taken
        log.info(
            "packet id %d resent with DUP=1 equals the message stored at WAL offset %d and "
            "the resends after it equal the messages stored after it: resends that follow "
            "it in order up to offset %d are not stored again",
            message_id,
            found,
            self.conn_start,
        )
        return taken

    def _confirm(self, found: int, pairs: list[tuple[int, int]], k: int) -> int:
        """Follow the run from ``found`` over ``pairs[k + 1:]``: 1 + the confirming pairs
        when CONFIRM of them (or all stored QoS 1 records up to ``conn_start``) match,
        else 0. Leaves the cursor after the last match."""
        chunk = self._chunk_at(found)
        if chunk is None or not self._advance(chunk, found - chunk.lo + 1):
            return 0
        taken = 1
        while taken <= CONFIRM:
            cursor = self._cursor
            if cursor is None:
                return taken  # the run reached conn_start: every record after ``found`` matched
            at = k + taken
            if at >= len(pairs):
                if not self._final:
                    raise _NeedMore  # the read ended before the hit was confirmed
                return 0
            chunk = self._chunk_at(cursor)
            if chunk is None:
                return 0
            if not chunk.holds(cursor, *pairs[at]):
                return 0
            if not self._advance(chunk, cursor - chunk.lo + 1):
                return 0
            taken += 1
        return taken

    def _search(self, message_id: int, digest: int) -> int | None:
        """Offset of the latest QoS 1 record below ``conn_start`` with this id and digest."""
        self.searches += 1
        hi = self.conn_start
        size = self._size
        while True:
            first = self.wal.first_offset
            lo = max(first, hi - size)
            if lo >= hi:
                return None
            chunk = self._read(lo, hi)
            if chunk is None:
                if self.wal.first_offset == first:
                    return None
                continue  # truncated meanwhile: the search stops at the new first offset
            found = chunk.rfind(message_id, digest)
            if found is not None:
                return found
            size = self._next_size(chunk)
            hi = lo

    def _advance(self, chunk: _Chunk, i: int) -> bool:
        """Move the cursor to the first QoS 1 record at or after row ``i`` of ``chunk``, or
        end the run at ``conn_start``; False when truncation deleted records on the way."""
        while True:
            n = chunk.hi - chunk.lo
            while i < n and not chunk.is_qos1(i):
                i += 1
            if i < n:
                self._cursor = chunk.lo + i
                self._chunk = chunk
                return True
            if chunk.hi >= self.conn_start:
                self._end_run()  # everything stored before this connection was resent
                self._searched = True
                return True
            next_chunk = self._read(chunk.hi, min(self.conn_start, chunk.hi + self._size))
            if next_chunk is None:
                self._end_run()
                return False
            self._size = self._next_size(next_chunk)
            chunk, i = next_chunk, 0

    def _chunk_at(self, offset: int) -> _Chunk | None:
        chunk = self._chunk
        if chunk is not None and chunk.lo <= offset < chunk.hi:
            return chunk
        chunk = self._read(offset, min(self.conn_start, offset + self._size))
        self._chunk = chunk
        return chunk

    def _read(self, lo: int, hi: int) -> _Chunk | None:
        """Records [lo, hi) of the WAL; None when truncation deleted some of them."""
        try:
            return _Chunk(self.reader.read(lo, hi))
        except WalDataLossError as exc:
            log.debug("WAL range [%d, %d) is no longer stored: %s", lo, hi, exc)
            return None

    def _next_size(self, chunk: _Chunk) -> int:
        """Records for the next read: about CHUNK_BYTES of payload, at most ``chunk_records``."""
        n = chunk.hi - chunk.lo
        per_record = max(1, chunk.payload_bytes() // max(1, n))
        return max(min(256, self._max), min(self._max, CHUNK_BYTES // per_record))
