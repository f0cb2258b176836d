"""The Sparkplug B payload (Sparkplug 3.0 chapter 6) decoded by the ``protobuf`` package's upb
runtime from our own ``sparkplug_b.proto`` (:mod:`.sparkplug_b_pb2`), sans-I/O and strict.

A payload holds a timestamp, a sequence number, metrics, an optional ``uuid`` and ``body``. A
metric carries its value in one field of a ``oneof`` (``int_value`` 10 to ``extension_value``
19), which :mod:`.datatypes` turns into the value of the metric's datatype, often the birth's.

upb parses in C. Strictness is kept with no Python per field: after the parse the message drops
what upb did not recognise and is serialised again; when that gives back the very bytes that
came, each field was of its declared wire type, no field or ``oneof`` was set twice and every
string was UTF-8 (proto3 syntax has upb refuse any other). Bytes that upb refuses or that do not
come back the same (a non-canonical but valid encoding, an unknown field, an extension) are
walked once more field by field (:func:`_check`, over :mod:`.wire` and the message descriptors),
which raises :class:`PayloadError` naming the place and the rule (``metrics[3].properties``) or
accepts them: unknown fields and extensions are skipped (protocol buffers' rule), so a payload
from a newer writer still reads. Two rules no parser knows are checked on the message: a
property set pairs its keys and values one to one, and nothing nests deeper than
:data:`MAX_DEPTH`.

The decoded messages are the generated classes: :data:`Payload`, :data:`Metric`,
:data:`Template`, :data:`DataSet`, :data:`PropertySet`, :data:`PropertyValue`. A field that can
be absent is read with the helpers below (:func:`optional`), since protobuf reads an absent
field as its default.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from . import sparkplug_b_pb2 as pb
from .wire import (
    FIXED32,
    FIXED64,
    LENGTH,
    MAX_FIELD_NUMBER,
    VARINT,
    WireError,
    read_varint,
)
from .wire import fields as wire_fields
from .wire import optional as optional  # the presence rule, for readers of a decoded payload

Payload = pb.Payload
Metric = pb.Payload.Metric
Template = pb.Payload.Template
Parameter = pb.Payload.Template.Parameter
DataSet = pb.Payload.DataSet
PropertySet = pb.Payload.PropertySet
PropertySetList = pb.Payload.PropertySetList
PropertyValue = pb.Payload.PropertyValue

MAX_DEPTH = 32
"""Nesting of templates in templates, property sets in property sets, at most: a payload deeper
than this is refused rather than read on (a hostile payload could otherwise recurse)."""


COMPRESSED_UUID = "SPBV1.0_COMPRESSED"
"""The ``uuid`` of a payload whose ``body`` is another payload, compressed (Sparkplug 3.0
section 6.4.3); its ``algorithm`` metric says how: DEFLATE (the default) or GZIP."""

DEFAULT_DECOMPRESSED_LIMIT = 16 * 1024 * 1024
"""The most bytes a compressed payload may inflate to: a larger one is refused (a small
message cannot make the reader hold a huge one)."""


class PayloadError(ValueError):
    """Bytes that are not a Sparkplug B payload; the message names the place and the rule."""


METRIC_VALUE_FIELDS = {
    field.number: field.name for field in Metric.DESCRIPTOR.oneofs_by_name["value"].fields
}
"""The fields of ``Metric.value`` (the ``oneof``), by number: 10 ``int_value`` ... 19
``extension_value``."""

METRIC_FIELD_NUMBERS = {name: number for number, name in METRIC_VALUE_FIELDS.items()}
"""The number of each field of ``Metric.value``, by name."""


def value_field(message: Any) -> int | None:
    """The number of the ``oneof value`` field ``message`` (a metric) carries, None for none."""
    which = message.WhichOneof("value")
    return None if which is None else METRIC_FIELD_NUMBERS[which]


def value_of(message: Any) -> Any:
    """The raw value of a metric, property, parameter or data set cell (its ``oneof value``):
    an int, float, bool, str, bytes or nested message; None when no field is set."""
    which = message.WhichOneof("value")
    return None if which is None else getattr(message, which)


# -------------------------------------------------------------------------- decoding


def decode_payload(data: bytes) -> pb.Payload:
    """The payload in ``data``; PayloadError when it is not one."""
    return _decode(data)[0]


def _decode(data: bytes) -> tuple[pb.Payload, bool]:
    """The payload in ``data``, and whether ``data`` is its canonical encoding (what upb
    serialises it to)."""
    try:
        payload = Payload.FromString(data)
    except DecodeError as exc:
        _check(data)  # raises, naming the place
        raise PayloadError(f"not a Sparkplug B payload: {exc}") from None
    payload.DiscardUnknownFields()
    canonical = payload.SerializeToString() == data
    if not canonical:
        _check(data)
    elif _PROPERTIES_TAG in data or b"\x8a\x01" in data or b"\x92\x01" in data:
        # The tag of a metric's properties (9), data set (17) or template (18): only then can
        # a property set be unpaired or the nesting too deep.
        _check_nesting(payload)
    return payload, canonical


_PROPERTIES_TAG = b"\x4a"
"""Field 9, length-delimited: a metric's properties (and a property's nested set)."""


class Read(NamedTuple):
    """A message's payload (:func:`decode_message`) and what its bytes say of all its
    metrics, which spares their reader a check per field."""

    payload: pb.Payload
    plain: bool
    """The optional scalar fields (the payload's timestamp and seq, a metric's name, alias,
    timestamp and datatype) are set only where not the default: a default read means absent."""
    properties: bool
    """Some metric may have properties (False: none has)."""
    flags: bool
    """Some metric may have ``is_null``, ``is_historical`` or ``is_transient`` true."""


def read_message(data: bytes, limit: int = DEFAULT_DECOMPRESSED_LIMIT) -> Read:
    """:func:`decode_message`, and what the bytes say of all its metrics (:class:`Read`). In
    a canonical encoding a field set to its default is its key and a zero byte, a bool set true
    its key and a one byte: where no such pair is in the bytes, no field was sent so."""
    payload, canonical = _decode(data)
    if payload.uuid == COMPRESSED_UUID:
        data = _inflated(payload, limit)
        payload, canonical = _decode(data)
    if not canonical:
        return Read(payload, False, True, True)
    plain = not (
        b"\x08\x00" in data  # a payload's timestamp
        or b"\x0a\x00" in data  # a metric's name
        or b"\x10\x00" in data  # alias
        or b"\x18\x00" in data  # a metric's timestamp, a payload's seq
        or b"\x20\x00" in data  # datatype
    )
    flags = b"\x28\x01" in data or b"\x30\x01" in data or b"\x38\x01" in data
    return Read(payload, plain, _PROPERTIES_TAG in data, flags)


def _check_nesting(payload: pb.Payload) -> None:
    for index, metric in enumerate(payload.metrics):
        _nested_metric(metric, f"metrics[{index}]", 0)


def _nested_metric(metric: pb.Payload.Metric, where: str, depth: int) -> None:
    _deep(depth, where)
    if metric.HasField("properties"):
        _nested_properties(metric.properties, f"{where}.properties", depth + 1)
    which = metric.WhichOneof("value")
    if which == "template_value":
        name = f"{where}.template_value"
        _deep(depth + 1, name)
        for index, member in enumerate(metric.template_value.metrics):
            _nested_metric(member, f"{name}.metrics[{index}]", depth + 2)
    elif which == "dataset_value":
        _deep(depth + 1, f"{where}.dataset_value")


def _nested_properties(props: pb.Payload.PropertySet, where: str, depth: int) -> None:
    _deep(depth, where)
    if len(props.keys) != len(props.values):
        raise PayloadError(
            f"{where} has {len(props.keys)} keys and {len(props.values)} values: a property "
            "set pairs them one to one (Sparkplug 3.0 section 6.4.8)"
        )
    for index, prop in enumerate(props.values):
        which = prop.WhichOneof("value")
        if which == "propertyset_value":
            _nested_properties(
                prop.propertyset_value, f"{where}.values[{index}].propertyset_value", depth + 1
            )
        elif which == "propertysets_value":
            for k, nested in enumerate(prop.propertysets_value.propertyset):
                _nested_properties(
                    nested, f"{where}.values[{index}].propertysets_value[{k}]", depth + 1
                )


def _deep(depth: int, where: str) -> None:
    if depth > MAX_DEPTH:
        raise PayloadError(f"{where} is nested more than {MAX_DEPTH} deep")


# -------------------------------------------------------------------------- the strict walk

_WIRE_OF = {
    FieldDescriptor.TYPE_UINT64: (VARINT, "varint"),
    FieldDescriptor.TYPE_UINT32: (VARINT, "varint"),
    FieldDescriptor.TYPE_BOOL: (VARINT, "varint"),
    FieldDescriptor.TYPE_FLOAT: (FIXED32, "float"),
    FieldDescriptor.TYPE_DOUBLE: (FIXED64, "double"),
    FieldDescriptor.TYPE_STRING: (LENGTH, "length-delimited"),
    FieldDescriptor.TYPE_BYTES: (LENGTH, "length-delimited"),
    FieldDescriptor.TYPE_MESSAGE: (LENGTH, "length-delimited"),
}

_DEEPER = frozenset({"Metric", "Template", "DataSet", "PropertySet"})
"""The messages that count as a level of nesting (a payload's own metrics are level 0)."""


def _check(data: bytes) -> None:
    """Walk ``data`` field by field as a Payload; PayloadError naming the first place that
    breaks a rule. Returns when every rule holds (the bytes were valid, if not canonical)."""
    too_large: list[str] = []
    try:
        _walk(data, Payload.DESCRIPTOR, "", -1, too_large)
    except WireError as exc:
        raise PayloadError(f"not a Sparkplug B payload: {exc}") from None
    if too_large:
        raise PayloadError(f"not a Sparkplug B payload: {too_large[0]}")


def _walk(
    data: bytes | memoryview, descriptor: Descriptor, where: str, depth: int, too_large: list[str]
) -> None:
    """One message of type ``descriptor`` at ``where`` (its path in the payload). A place is
    named as a path of fields; an item of a repeated message field by its index (a metric's
    wire type by the field's name alone); a value of a property, parameter or data set cell
    by the place of its holder. A field number above protocol buffers' largest is put in
    ``too_large`` (upb refuses the payload; the walk goes on for a rule that comes first)."""
    kind = descriptor.name
    if kind in _DEEPER:
        depth += 1
        _deep(depth, where)
    prefix = f"{where}." if where else ""
    value_set = False
    counts: dict[int, int] = {}
    for number, wire, value in wire_fields(data, where=where or "payload"):
        if number > MAX_FIELD_NUMBER:
            if not too_large:
                too_large.append(
                    f"{where or 'payload'}: field number {number} is above protocol buffers' "
                    f"largest ({MAX_FIELD_NUMBER})"
                )
            continue
        field = descriptor.fields_by_number.get(number)
        if field is None:
            continue  # unknown, or an extension: skipped
        index = counts.get(number, 0)
        counts[number] = index + 1
        in_value = field.containing_oneof is not None and field.containing_oneof.name == "value"
        if in_value:
            holder = where
            if value_set:
                raise PayloadError(f"{holder} sets more than one field of its oneof value")
            value_set = True
        repeated_message = field.is_repeated and field.type == FieldDescriptor.TYPE_MESSAGE
        # The name of the field in an error: a metric's value by its field's name.
        if in_value and kind != "Metric":
            name = where
        elif kind == "PropertySetList":
            name = where.rpartition(".")[0]
        elif repeated_message and field.message_type.name != "Metric":
            name = f"{prefix}{field.name}[{index}]"
        else:
            name = f"{prefix}{field.name}"
        want, wire_name = _WIRE_OF[field.type]
        if field.is_repeated and wire == LENGTH and want == VARINT:
            assert not isinstance(value, int)
            _packed(value)  # a packed repeated scalar
            continue
        if wire != want:
            raise PayloadError(f"{name} has wire type {wire}; a {wire_name} field has another")
        if field.type == FieldDescriptor.TYPE_STRING:
            try:
                bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PayloadError(f"{name} is not UTF-8: {exc}") from None
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            assert not isinstance(value, int)
            if kind == "PropertySetList":
                nested = f"{where}[{index}]"
            elif repeated_message:
                nested = f"{prefix}{field.name}[{index}]"
            else:
                nested = f"{prefix}{field.name}"
            _walk(value, field.message_type, nested, depth, too_large)
    if kind == "PropertySet":
        keys, values = counts.get(1, 0), counts.get(2, 0)
        if keys != values:
            raise PayloadError(
                f"{where} has {keys} keys and {values} values: a property set pairs them one "
                "to one (Sparkplug 3.0 section 6.4.8)"
            )


def _packed(value: bytes | memoryview) -> None:
    """The varints of a packed repeated field, each one whole."""
    pos, end = 0, len(value)
    while pos < end:
        _, pos = read_varint(value, pos, end)


# -------------------------------------------------------------------------- compression


def decode_message(data: bytes, limit: int = DEFAULT_DECOMPRESSED_LIMIT) -> pb.Payload:
    """The payload of a Sparkplug message: ``data`` decoded, and when it is a compressed
    payload, its body inflated (at most ``limit`` bytes) and decoded."""
    outer = decode_payload(data)
    if outer.uuid != COMPRESSED_UUID:
        return outer
    return decode_payload(_inflated(outer, limit))


def _inflated(outer: pb.Payload, limit: int) -> bytes:
    """The body of a compressed payload, inflated."""
    algorithm = "DEFLATE"
    for metric in outer.metrics:
        if metric.name == "algorithm" and metric.WhichOneof("value") == "string_value":
            algorithm = metric.string_value.upper()
    if not outer.HasField("body"):
        raise PayloadError(f"a {COMPRESSED_UUID} payload without a body")
    return inflate(outer.body, algorithm, limit)


def inflate(body: bytes, algorithm: str, limit: int) -> bytes:
    """``body`` decompressed with ``algorithm`` (DEFLATE: zlib's stream, GZIP), refusing more
    than ``limit`` bytes of output."""
    if algorithm == "GZIP":
        wbits = 16 + zlib.MAX_WBITS
    elif algorithm == "DEFLATE":
        wbits = zlib.MAX_WBITS
    else:
        raise PayloadError(f"compression algorithm {algorithm!r} is not DEFLATE or GZIP")
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise PayloadError(f"the {algorithm} body does not inflate: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise PayloadError(f"the {algorithm} body inflates past the limit of {limit} bytes")
    if not inflater.eof:
        raise PayloadError(f"the {algorithm} body is cut short")
    return out
