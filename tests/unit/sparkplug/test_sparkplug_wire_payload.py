"""Our protocol buffers walk (the strict reader that names a place) and the Sparkplug B payload
decoded by upb from our own .proto, against byte vectors and against pysparkplug's protobuf
classes (an independent implementation of sparkplug_b.proto): every field of every message
type, unknown fields skipped, and malformed bytes refused with the place and the rule; a
Hypothesis round trip and a bounded fuzz."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.sparkplug.payload import (
    COMPRESSED_UUID,
    MAX_DEPTH,
    PayloadError,
    decode_message,
    decode_payload,
    optional,
    read_message,
    value_field,
    value_of,
)
from connector.sparkplug.wire import WireError, fields, read_varint
from devtools.sparkplug_payloads import pb, rich_payload

# ---------------------------------------------------------------------------- the wire


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"\x00", 0),
        (b"\x01", 1),
        (b"\xac\x02", 300),
        (b"\xff\xff\xff\xff\x0f", 0xFFFF_FFFF),
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 0xFFFF_FFFF_FFFF_FFFF),
    ],
)
def test_varints_read_to_64_bits(data: bytes, value: int) -> None:
    assert read_varint(data, 0, len(data)) == (value, len(data))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x80", "cut short"),
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", "longer than 64 bits"),
        (b"\xff" * 10 + b"\x01", "runs past 10 bytes"),
    ],
)
def test_bad_varints_are_refused_with_their_position(data: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        read_varint(data, 0, len(data))


def test_fields_of_each_wire_type() -> None:
    data = (
        b"\x08\x96\x01"  # 1: varint 150
        + b"\x11" + struct.pack("<Q", 7)  # 2: fixed64
        + b"\x1a\x03abc"  # 3: length-delimited
        + b"\x25" + struct.pack("<I", 9)  # 4: fixed32
    )  # fmt: skip
    got = [(n, w, bytes(v) if not isinstance(v, int) else v) for n, w, v in fields(data)]
    assert got == [(1, 0, 150), (2, 1, 7), (3, 2, b"abc"), (4, 5, 9)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x0b", "groups are not supported"),
        (b"\x0e", "no such wire type"),
        (b"\x00\x01", "field number 0"),
        (b"\x0a\x05ab", "runs past the end"),
        (b"\x09\x01\x02", "8 bytes cut short"),
        (b"\x0d\x01", "4 bytes cut short"),
    ],
)
def test_malformed_messages_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        list(fields(data))


def test_data_set_types_read_packed_or_not() -> None:
    """A repeated scalar comes packed (proto3 writers) or one key per value (proto2's
    default, Tahu): both read the same."""
    types = b"\x1a\x04\x03\x0c\xac\x02"  # DataSet.types packed: 3, 12, 300
    unpacked = b"\x18\x03\x18\x0c\x18\xac\x02"
    for body in (types, unpacked):
        metric = b"\x20\x10" + b"\x8a\x01" + bytes([len(body)]) + body  # datatype 16, value
        data = b"\x12" + bytes([len(metric)]) + metric
        assert list(decode_payload(data).metrics[0].dataset_value.types) == [3, 12, 300]


# ---------------------------------------------------------------------------- the payload


def test_every_field_reads_as_the_oracle_wrote_it() -> None:
    payload = decode_payload(rich_payload())
    assert (payload.timestamp, payload.seq, payload.uuid, payload.body) == (
        1_700_000_000_000,
        255,
        "u-1",
        b"raw",
    )
    m = payload.metrics[0]
    assert (m.name, m.alias, m.timestamp, m.datatype) == ("a/b", 7, 1_700_000_000_001, 3)
    assert (m.is_historical, m.is_transient, m.is_null) == (True, True, False)
    assert (value_field(m), value_of(m)) == (10, 4294967295)
    assert m.HasField("metadata")
    assert (m.metadata.content_type, m.metadata.size, m.metadata.md5) == ("text/plain", 10, "abc")
    assert (m.metadata.file_name, m.metadata.file_type, m.metadata.description) == (
        "f.txt",
        "txt",
        "desc",
    )
    assert m.HasField("properties") and m.properties.keys == ["Quality", "nested", "list"]
    quality, nested, listed = m.properties.values
    assert (quality.type, quality.WhichOneof("value"), value_of(quality)) == (3, "int_value", 192)
    assert nested.WhichOneof("value") == "propertyset_value"
    assert nested.propertyset_value.keys == ["engUnit"]
    assert value_of(nested.propertyset_value.values[0]) == "degC"
    assert listed.WhichOneof("value") == "propertysets_value"
    assert listed.propertysets_value.propertyset[0].values[0].is_null
    assert payload.metrics[1].WhichOneof("value") == "dataset_value"
    ds = payload.metrics[1].dataset_value
    assert (ds.num_of_columns, ds.columns, ds.types) == (3, ["i", "s", "f"], [3, 12, 9])
    assert [(c.WhichOneof("value"), value_of(c)) for c in ds.rows[0].elements] == [
        ("int_value", 4294967295),
        ("string_value", "x"),
        ("float_value", 1.5),
    ]
    assert payload.metrics[2].WhichOneof("value") == "template_value"
    tm = payload.metrics[2].template_value
    assert (tm.version, tm.template_ref, tm.is_definition) == ("v1", "Motor", False)
    assert (tm.parameters[0].name, tm.parameters[0].type, value_of(tm.parameters[0])) == (
        "p",
        7,
        5,
    )
    assert (tm.metrics[0].name, value_of(tm.metrics[0])) == ("rpm", 3000.5)
    assert [(value_field(m), value_of(m)) for m in payload.metrics[3:]] == [
        (11, 2**64 - 1),
        (13, -0.25),
        (14, True),
        (16, b"\x00\xff"),
    ]


def test_unknown_fields_and_extensions_are_skipped() -> None:
    known = pb().Payload(seq=3).SerializeToString()
    extended = known + b"\xa0\x06\x05" + b"\xaa\x06\x02hi"  # fields 100 and 101
    assert decode_payload(extended).seq == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x12\x04\x50\x01\x58\x01", r"metrics\[0\] sets more than one field of its oneof"),
        (b"\x12\x02\x0a\x01", "runs past the end"),
        (b"\x12\x03\x0a\x01\xff", r"metrics\[0\]\.name is not UTF-8"),
        (
            b"\x12\x02\x10\x00" + b"\x12\x02\x15\x00",
            r"metrics\[1\]: field 2 at byte 0: 4 bytes cut short \(1 left\)",
        ),
        (b"\x0a\x01\x00", "timestamp has wire type 2"),
        (b"\x12\x05\x4a\x03\x0a\x01\x61", r"metrics\[0\]\.properties has 1 keys and 0 values"),
    ],
)
def test_malformed_payloads_name_the_place(data: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        decode_payload(data)


def test_nesting_beyond_the_limit_is_refused() -> None:
    template = pb().Payload.Template()
    for _ in range(MAX_DEPTH + 2):
        outer = pb().Payload.Template()
        inner_metric = outer.metrics.add()
        inner_metric.name, inner_metric.datatype = "t", 19
        inner_metric.template_value.CopyFrom(template)
        template = outer
    message = pb().Payload()
    metric = message.metrics.add()
    metric.name, metric.datatype = "deep", 19
    metric.template_value.CopyFrom(template)
    with pytest.raises(PayloadError, match=f"nested more than {MAX_DEPTH} deep"):
        decode_payload(message.SerializeToString())


def test_compressed_payloads_inflate_within_a_limit() -> None:
    import gzip
    import zlib

    inner = pb().Payload(seq=9)
    metric = inner.metrics.add()
    metric.name, metric.datatype, metric.string_value = "s", 12, "x" * 5000
    raw = inner.SerializeToString()
    for algorithm, body in (("DEFLATE", zlib.compress(raw)), ("GZIP", gzip.compress(raw))):
        outer = pb().Payload(uuid=COMPRESSED_UUID, body=body)
        alg = outer.metrics.add()
        alg.name, alg.datatype, alg.string_value = "algorithm", 12, algorithm
        payload = decode_message(outer.SerializeToString())
        assert payload.seq == 9 and value_of(payload.metrics[0]) == "x" * 5000
        with pytest.raises(PayloadError, match="inflates past the limit of 1000 bytes"):
            decode_message(outer.SerializeToString(), limit=1000)
    broken = pb().Payload(uuid=COMPRESSED_UUID, body=b"not deflate").SerializeToString()
    with pytest.raises(PayloadError, match="does not inflate"):
        decode_message(broken)


# ---------------------------------------------------------------------------- round trip, fuzz

_scalars = st.one_of(
    st.tuples(st.just("int_value"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("long_value"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("double_value"), st.floats(allow_nan=False)),
    st.tuples(st.just("boolean_value"), st.booleans()),
    st.tuples(st.just("string_value"), st.text(max_size=20)),
    st.tuples(st.just("bytes_value"), st.binary(max_size=20)),
)
_metrics = st.lists(
    st.tuples(
        st.none() | st.text(max_size=12),
        st.none() | st.integers(0, 2**64 - 1),
        st.none() | st.integers(0, 34),
        st.none() | _scalars,
        st.booleans(),
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    metrics=_metrics,
    seq=st.none() | st.integers(0, 255),
    timestamp=st.none() | st.integers(0, 2**64 - 1),
)
def test_round_trip_against_the_oracle(
    metrics: list[tuple[str | None, int | None, int | None, tuple[str, object] | None, bool]],
    seq: int | None,
    timestamp: int | None,
) -> None:
    message = pb().Payload()
    if seq is not None:
        message.seq = seq
    if timestamp is not None:
        message.timestamp = timestamp
    for name, alias, datatype, value, historical in metrics:
        m = message.metrics.add()
        if name is not None:
            m.name = name
        if alias is not None:
            m.alias = alias
        if datatype is not None:
            m.datatype = datatype
        m.is_historical = historical
        if value is not None:
            setattr(m, value[0], value[1])
    data = message.SerializeToString()
    got = decode_payload(data)
    assert (optional(got, "seq"), optional(got, "timestamp")) == (seq, timestamp)
    assert len(got.metrics) == len(metrics)
    for ours, (name, alias, datatype, value, historical) in zip(got.metrics, metrics, strict=True):
        assert (
            optional(ours, "name"),
            optional(ours, "alias"),
            optional(ours, "datatype"),
            ours.is_historical,
        ) == (name, alias, datatype, historical)
        if value is None:
            assert value_field(ours) is None
        else:
            assert ours.WhichOneof("value") == value[0]
            assert value_of(ours) == value[1]
    # Where the decoder says the fields are plain, a default read means an absent field; where
    # it says no flag is set, none is.
    read = read_message(data)
    fast = read.payload
    if not read.flags:
        assert not any(historical for *_, historical in metrics)
    if read.plain:
        assert (fast.seq or None, fast.timestamp or None) == (seq, timestamp)
        for ours, (name, alias, datatype, _, _) in zip(fast.metrics, metrics, strict=True):
            assert (ours.name or None, ours.alias or None, ours.datatype or None) == (
                name,
                alias,
                datatype,
            )
