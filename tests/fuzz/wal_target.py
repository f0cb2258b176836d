"""Fuzz target: WAL recovery and reads of a damaged WAL directory.

A template WAL (a few sealed segments and an active one, every record appended and fsynced
one at a time) is copied afresh for each input, then damaged as the input says: bytes flipped
or overwritten, files truncated or extended, in any of its files (segments, index hints,
identity). Then:

* a lock-free :class:`WalReader` over the damaged directory returns exactly the records that
  were written, or raises a :class:`WalError`;
* :meth:`WalWriter.open` (recovery) raises a :class:`WalError`, or yields offsets
  ``[first, end)`` whose records are exactly those written, where ``end`` covers every record
  stored before the first damaged byte: only the tail of the last segment may be cut;
* the recovered WAL takes a new record and reads back after a reopen.

Input layout: byte 0 picks the template (bit 0) and the number of damages (bits 1-2); then 5
bytes per damage: kind, file, position (2 bytes), value.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from connector.wal import NewRecord, WalError, WalReader, WalWriter

SEGMENT_BYTES = 700
SEGMENT_SUFFIX = ".seg"


@dataclass(frozen=True)
class Template:
    root: Path
    first: int
    records: list[NewRecord]
    ends: dict[str, list[int]]
    """Per segment file: the end position of each record it holds, in order."""


def _records(count: int) -> list[NewRecord]:
    out = []
    for n in range(count):
        qos = n % 3
        out.append(
            NewRecord(
                topic=f"plant/{n % 4}/t",
                payload=bytes([n % 251]) * (n * 7 % 90),
                qos=qos,
                retain=n % 5 == 0,
                dup=n % 7 == 0,
                packet_id=(n % 50) + 1 if qos else None,
                timestamp_us=1_700_000_000_000_000 + n,
                properties=b"\x03\x00\x04json" if n % 4 == 1 else b"",  # some blocks kind 6
            )
        )
    return out


def _build(root: Path, truncate: bool) -> Template:
    records = _records(40)
    ends: dict[str, list[int]] = {}
    with WalWriter.open(root, segment_max_bytes=SEGMENT_BYTES) as wal:
        for record in records:
            wal.append([record])
            active = max(p for p in os.listdir(root) if p.endswith(SEGMENT_SUFFIX))
            ends.setdefault(active, []).append(os.path.getsize(root / active))
        if truncate:
            wal.truncate_before(15)
        first = wal.first_offset
    segments = sorted(p for p in os.listdir(root) if p.endswith(SEGMENT_SUFFIX))
    return Template(root, first, records, {name: ends.get(name, []) for name in segments})


_TEMPLATES: list[Template] = []
_WORK: list[Path] = []


def _setup() -> None:
    if _TEMPLATES:
        return
    base = Path(
        tempfile.mkdtemp(prefix="wal-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    _TEMPLATES.extend([_build(base / "t0", False), _build(base / "t1", True)])
    _WORK.append(base / "work")


def _files(root: Path) -> list[str]:
    return sorted(p for p in os.listdir(root) if p != "LOCK")


def _damage(root: Path, data: bytes, count: int) -> dict[str, int]:
    """Apply the damages; returns the first damaged byte position per file."""
    touched: dict[str, int] = {}
    files = _files(root)
    for at in range(1, 1 + 5 * count, 5):
        op = data[at : at + 5]
        if len(op) < 5:
            break
        kind, name = op[0] % 4, files[op[1] % len(files)]
        path = root / name
        size = path.stat().st_size
        pos = ((op[2] << 8) | op[3]) % (size + 1)
        if kind in (0, 1):  # flip bits of / overwrite one byte
            if pos == size:
                continue
            with open(path, "r+b") as handle:
                handle.seek(pos)
                old = handle.read(1)[0]
                new = old ^ (op[4] or 1) if kind == 0 else op[4]
                if new == old:
                    continue
                handle.seek(pos)
                handle.write(bytes([new]))
        elif kind == 2:  # cut the file
            if pos == size:
                continue
            os.truncate(path, pos)
        else:  # extend the file
            with open(path, "ab") as handle:
                handle.write(bytes([op[4]]) * (op[2] % 32 + 1))
            pos = size
        touched[name] = min(pos, touched.get(name, pos))
    return touched


def _check_records(root: Path, first: int, end: int, records: list[NewRecord]) -> None:
    columns = WalReader(root).read(first, end)
    assert len(columns) == end - first, (len(columns), first, end)
    expected = records[first:end]
    assert columns.payloads == [r.payload for r in expected], "payloads differ"
    assert columns.topics == [r.topic for r in expected], "topics differ"
    assert columns.qos == [r.qos for r in expected], "qos differs"
    assert columns.packet_ids == [r.packet_id for r in expected], "message ids differ"
    assert columns.timestamps_us == [r.timestamp_us for r in expected], "timestamps differ"
    assert columns.retain == [r.retain for r in expected], "retain flags differ"
    assert columns.dup == [r.dup for r in expected], "dup flags differ"


def _safe_end(template: Template, touched: dict[str, int]) -> int:
    """Records recovery must keep: all, except those at or after the first damaged byte of
    the last segment."""
    last = max(template.ends)
    if last not in touched:
        return len(template.records)
    before_last = len(template.records) - len(template.ends[last])
    kept = sum(1 for end in template.ends[last] if end <= touched[last])
    return before_last + kept


def one_input(data: bytes) -> None:
    _setup()
    if not data:
        return
    template = _TEMPLATES[data[0] & 1]
    work = _WORK[0]
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template.root, work)
    touched = _damage(work, data, ((data[0] >> 1) & 3) + 1)
    n = len(template.records)

    try:  # a reader that finds damage says so; what it returns is what was written
        _check_records(work, template.first, n, template.records)
        read_ok = True
    except WalError:
        read_ok = False
    assert read_ok or touched, "an undamaged WAL must read back"

    try:
        wal = WalWriter.open(work, segment_max_bytes=SEGMENT_BYTES, fsync=False)
    except WalError:
        return
    try:
        first, end = wal.first_offset, wal.next_offset
        assert first == template.first, (first, template.first)
        assert end <= n, (end, n)
        assert end >= _safe_end(template, touched), (end, _safe_end(template, touched), touched)
        _check_records(work, first, end, template.records)
        extra = NewRecord("after/recovery", b"new", 1, False, False, 99, 1)
        wal.append([extra])
    finally:
        wal.close()
    with WalWriter.open(work, segment_max_bytes=SEGMENT_BYTES, fsync=False) as again:
        assert again.next_offset == end + 1, (again.next_offset, end)
    _check_records(work, first, end, template.records)
    assert WalReader(work).read(end, end + 1).payloads == [b"new"]


def seeds() -> list[bytes]:
    out = [b"\x00", b"\x01"]
    for template in (0, 1):
        for kind in range(4):
            for file in range(6):
                for pos in (0, 20, 300, 699, 65535):
                    out.append(bytes([template, kind, file, pos >> 8, pos & 0xFF, 0x5A]))
    return out
