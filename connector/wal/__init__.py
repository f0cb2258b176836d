"""Durable write-ahead log between the MQTT receiver and the Spark source.

The receiver appends a batch of PUBLISH messages with :meth:`WalWriter.append` (one fsync per
batch) and acknowledges them to the broker only afterwards. Spark reads offset ranges with
:class:`WalReader` (lock-free, from any process) and, once a batch is committed, the source
calls :meth:`WalWriter.truncate_before` to delete old segments. Offsets are gap-free: the first
record ever appended is offset 0 and every data record takes the next one. Nothing here
imports Spark or :mod:`connector.mqtt`; ``pyarrow.fs`` only for a WAL on shared storage.

Two layouts of the format below, chosen by the WAL's location (:mod:`.location`; open either
with :mod:`.opening`): files in a local directory (:class:`WalWriter`, :class:`WalReader`),
and immutable parts on shared storage or a FUSE mount of it (:mod:`.objects`,
:class:`~connector.wal.object_writer.ObjectWalWriter`,
:class:`~connector.wal.object_reader.ObjectWalReader`).

On-disk format (versions 2 and 3, all integers little endian)
-------------------------------------------------------------
Directory: ``wal.json`` (format name, version, identity = uuid4 hex), ``LOCK`` (flock of the
single writer; holds its pid and host), segments ``<first offset, 20 digits>.seg`` and
unsynced index hints ``<first offset>.idx`` (``u64 offset | u64 byte position`` pairs, one per
64 KiB of records, each at the start of the data block whose first offset that is; readers
validate each entry they use).

Segment = header, a state snapshot record, then records::

    header (40 bytes): 8s magic "MQTTWAL\\0" | u16 version | u16 reserved |
                       16s identity | u64 first offset | u32 crc32 of the preceding 36 bytes

Record = ``u32 length | u32 crc32 | u8 kind | body``; ``length`` counts kind + body and the
crc32 covers exactly those bytes. Kinds (any other is damage):

* 2 QoS 2 release: ``u32 n | n x u16 packet id`` (those ids are no longer pending).
* 3 state snapshot (first record of every segment): ``u32 n | u32 m | n x u16 pending QoS 2
  id | m x u16 QoS 1 id | m x u32 digest`` - the QoS state when the segment was created.
* 4 seal (last record of every full segment): ``u64 end offset | u32 crc32 of every byte of
  the segment before the seal``.
* 5 data block (version 2): consecutive data records column by column, one crc32 for all::

      u64 first offset | u32 n | u32 topic table bytes t |
      topic table (per distinct topic: u16 length | UTF-8) | zero padding to a multiple of 8 |
      n x i64 timestamp_us | n x u16 packet id | n x u8 flags | zero padding to a multiple
      of 4 | n x u32 topic index | (n + 1) x u32 payload end position (first 0) | payloads

  Positions are relative to the byte after the kind; flags: bits 0-1 QoS, bit 2 retain, bit 3
  dup, bit 4 packet id present (clear for QoS 0 without id); the body ends exactly after the
  last payload. The rows hold offsets [first, first + n); the first offset is explicit so every
  read checks that it is the next expected one. The writer makes one block of an append batch,
  cut where the segment rolls over and where an index hint is due (so a block holds at most
  64 KiB of rows before its last row, and its payload positions stay below 2^31). Details in
  :mod:`connector.wal.block`.
* 6 data block with properties (version 3): kind 5 plus each row's properties, opaque bytes
  the WAL never parses (the source stores an MQTT 5 PUBLISH's property encoding there)::

      ... n x u32 topic index | (n + 1) x u32 payload end position (first 0) |
      (n + 1) x u32 property end position (first 0) | payloads | property bytes

  Everything before the property ends is laid out as in kind 5; the property ends follow the
  payload ends (so every column keeps its alignment), and row i's properties are bytes
  [pend_i, pend_(i+1)) after the last payload; the body ends exactly after the last property
  byte. A row without properties has an empty range. The writer writes kind 6 only for a
  block in which some row has properties; a row's payload and properties together stay within
  the 256 MiB of one MQTT packet.

A segment file appears atomically (written as ``.tmp``, fsynced, renamed, directory fsynced)
and only after the previous segment was sealed and fsynced, so every non-last segment is
sealed. A segment rolls over before a data record when it already holds data and is at least
``segment_max_bytes`` long. Recovery rules: see :mod:`connector.wal.recovery`; a torn or
corrupt last block is cut whole, like a torn record.

Versions: version 2 segments hold data blocks (kind 5), version 3 adds blocks with properties
(kind 6). Readers accept both, and a version 2 segment that continues with kind 6 blocks; any
other version in ``wal.json`` or a segment header is refused (WalCorruptError). A new WAL is
version 2, and stays so, byte for byte, while no record has properties (MQTT 3.1 and 3.1.1
never have any). Before it writes the first kind 6 block, a writer rewrites ``wal.json`` with
version 3 (atomically, like every ``wal.json``: a temporary file renamed, or one PUT); the
active segment keeps its header and segments started later say version 3, so a reader that
knows only version 2 stops at "unsupported WAL format version 3". The inline blob
(:mod:`connector.wal.blob`) is version 2, or 3 when it holds a kind 6 block.
"""

from connector.wal.file_reader import WalReader, encode_range
from connector.wal.file_writer import DEFAULT_SEGMENT_MAX_BYTES, WalWriter

from .blob import decode_blob
from .columns import WalColumns
from .errors import (
    WalCorruptError,
    WalDataLossError,
    WalError,
    WalLockedError,
    WalStoreError,
    WalWriteError,
)
from .identity import read_identity
from .records import NewRecord, RecordTuple, WalRecord, record_digest

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "NewRecord",
    "RecordTuple",
    "WalColumns",
    "WalCorruptError",
    "WalDataLossError",
    "WalError",
    "WalLockedError",
    "WalReader",
    "WalRecord",
    "WalStoreError",
    "WalWriteError",
    "WalWriter",
    "decode_blob",
    "encode_range",
    "read_identity",
    "record_digest",
]
