"""Property: any sequence of appends, truncations and reopens matches a simple in-memory model.

``make fuzz`` raises the example budget through FUZZ_EXAMPLES.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.wal import (
    NewRecord,
    WalDataLossError,
    WalReader,
    WalRecord,
    WalWriter,
    decode_blob,
    record_digest,
)


@st.composite
def new_records(draw: st.DrawFn) -> NewRecord:
    qos = draw(st.integers(0, 2))
    return NewRecord(
        topic=draw(st.text(alphabet="ab/é温", max_size=6)),
        payload=draw(st.binary(max_size=60)),
        qos=qos,
        retain=draw(st.booleans()),
        dup=draw(st.booleans()),
        packet_id=draw(st.integers(1, 6)) if qos else None,
        timestamp_us=draw(st.integers(-(2**63), 2**63 - 1)),
        properties=draw(st.one_of(st.just(b""), st.binary(max_size=30))),
    )


OPERATIONS = st.one_of(
    st.tuples(
        st.just("append"),
        st.lists(new_records(), max_size=12),
        st.lists(st.integers(1, 6), max_size=3),
    ),
    st.tuples(st.just("truncate"), st.integers(0, 120)),
    st.tuples(st.just("reopen")),
)


@dataclass
class Model:
    """What the WAL must contain: every record ever appended, and the QoS state."""

    records: list[NewRecord] = field(default_factory=list)
    pending: set[int] = field(default_factory=set)
    digests: dict[int, int] = field(default_factory=dict)

    def append(self, records: list[NewRecord], released: list[int]) -> None:
        self.pending.difference_update(released)
        for record in records:
            if record.qos:
                self.digests[record.packet_id] = record_digest(record.topic, record.payload)  # type: ignore[index]
            if record.qos == 2:
                self.pending.add(record.packet_id)  # type: ignore[arg-type]
        self.records.extend(records)


def check(writer: WalWriter, model: Model, path: Path) -> None:
    """The writer's marks, the QoS state and every stored record agree with the model."""
    first, end = writer.first_offset, writer.next_offset
    assert end == len(model.records)
    assert first <= end
    assert writer.qos2_pending == model.pending
    for pid in range(1, 7):
        assert writer.latest_digest(pid) == model.digests.get(pid)
    reader = WalReader(path)
    columns = reader.read(first, end)
    expected = [WalRecord(first + i, *r) for i, r in enumerate(model.records[first:end])]
    assert list(columns.records()) == expected
    assert decode_blob(reader.encode_range(first, end)) == columns
    if first > 0:
        with pytest.raises(WalDataLossError):
            reader.read(first - 1, end)
    with pytest.raises(WalDataLossError):
        reader.read(first, end + 1)


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    operations=st.lists(OPERATIONS, max_size=25),
    segment_max_bytes=st.sampled_from([64, 200, 700, 1 << 20]),
)
def test_fuzz_wal_matches_model(operations: list[tuple[Any, ...]], segment_max_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wal"
        model = Model()
        writer = WalWriter.open(path, segment_max_bytes=segment_max_bytes, fsync=False)
        try:
            for operation in operations:
                if operation[0] == "append":
                    _, records, released = operation
                    assert writer.append(records, released_qos2=released) == (
                        len(model.records) + len(records)
                    )
                    model.append(records, released)
                elif operation[0] == "truncate":
                    offset = operation[1]
                    before = writer.segments
                    deleted = writer.truncate_before(offset)
                    assert writer.segments == before[deleted:]
                    assert all(later <= offset for later in before[1 : deleted + 1])
                    assert len(writer.segments) == 1 or writer.segments[1] > offset
                else:
                    writer.close()
                    writer = WalWriter.open(path, segment_max_bytes=segment_max_bytes, fsync=False)
                check(writer, model, path)
        finally:
            writer.close()
