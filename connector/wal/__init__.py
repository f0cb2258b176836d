"""Durable write-ahead log between the MQTT receiver and the Spark source.

The receiver appends a batch of PUBLISH messages with :meth:`WalWriter.append` (one fsync per
batch) and acknowledges them to the broker only afterwards. Spark reads offset ranges with
:class:`WalReader` (lock-free, from any process) and, once a batch is committed, the source
calls :meth:`WalWriter.truncate_before` to delete old segments. Offsets are gap-free: the first
record ever appended is offset 0 and every data record takes the next one. Nothing here
imports Spark, pyarrow or :mod:`connector.mqtt`.

On-disk format (version 1, all integers little endian)
------------------------------------------------------
Directory: ``wal.json`` (format name, version, identity = uuid4 hex), ``LOCK`` (flock of the
single writer; holds its pid and host), segments ``<first offset, 20 digits>.seg`` and
unsynced index hints ``<first offset>.idx`` (``u64 offset | u64 byte position`` pairs, one per
64 KiB of records; readers validate each entry they use).

Segment = header, a state snapshot record, then records::

    header (40 bytes): 8s magic "MQTTWAL\\0" | u16 version | u16 reserved |
                       16s identity | u64 first offset | u32 crc32 of the preceding 36 bytes

Record = ``u32 length | u32 crc32 | u8 kind | body``; ``length`` counts kind + body and the
crc32 covers exactly those bytes. Kinds:

* 1 data: ``u64 offset | i64 timestamp_us | u8 flags | u16 message id | u16 topic length |
  topic UTF-8 | payload``. flags: bits 0-1 QoS, bit 2 retain, bit 3 dup, bit 4 message id
  present (clear for QoS 0 without id). The offset is explicit so every read validates it.
* 2 QoS 2 release: ``u32 n | n x u16 packet id`` (those ids are no longer pending).
* 3 state snapshot (first record of every segment): ``u32 n | u32 m | n x u16 pending QoS 2
  id | m x u16 QoS 1 id | m x u32 digest`` - the QoS state when the segment was created.
* 4 seal (last record of every full segment): ``u64 end offset | u32 crc32 of every byte of
  the segment before the seal``.

A segment file appears atomically (written as ``.tmp``, fsynced, renamed, directory fsynced)
and only after the previous segment was sealed and fsynced, so every non-last segment is
sealed. A segment rolls over before a data record when it already holds data and is at least
``segment_max_bytes`` long. Recovery rules: see :mod:`connector.wal.recovery`.
"""

from .blob import decode_blob
from .columns import WalColumns
from .errors import (
    WalCorruptError,
    WalDataLossError,
    WalError,
    WalLockedError,
    WalWriteError,
)
from .identity import read_identity
from .reader import WalReader, encode_range
from .records import NewRecord, RecordTuple, WalRecord, record_digest
from .writer import DEFAULT_SEGMENT_MAX_BYTES, WalWriter

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
    "WalWriteError",
    "WalWriter",
    "decode_blob",
    "encode_range",
    "read_identity",
    "record_digest",
]
