"""The Sparkplug B payload (Sparkplug 3.0 chapter 6, ``sparkplug_b.proto``) read from bytes with
our own protocol buffers reader (:mod:`.wire`), sans-I/O and strict.

A payload holds a timestamp, a sequence number, metrics, an optional ``uuid`` and ``body``. A
metric carries its value in one field of a ``oneof`` (``int_value`` 10 to ``extension_value``
19); which field that was is kept (``Metric.value_field``) with the raw value, so that
:mod:`.datatypes` turns it into the value of the metric's datatype, which a DATA message often
leaves to the birth. A field of the wrong wire type for its number, a ``oneof`` set twice, a
string that is not UTF-8 or bytes that are not a message raise :class:`PayloadError` naming the
place (``metrics[3].properties``); unknown fields and extensions are skipped (protocol buffers'
rule), so a payload from a newer writer still reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .wire import (
    FIXED32,
    FIXED64,
    LENGTH,
    VARINT,
    WireError,
    as_double,
    as_float,
    as_text,
    packed_varints,
)
from .wire import fields as wire_fields

MAX_DEPTH = 32
"""Nesting of templates in templates, property sets in property sets, at most: a payload deeper
than this is refused rather than read on (a hostile payload could otherwise recurse)."""


class PayloadError(ValueError):
    """Bytes that are not a Sparkplug B payload; the message names the place and the rule."""


@dataclass(slots=True)
class Value:
    """A value of a ``oneof value`` (metric, property, parameter or data set cell): the field
    number that carried it (None: no value) and the raw value: an ``int`` for the varint and
    fixed fields (floats decoded), ``str``, ``bytes``, or a nested message."""

    field: int | None = None
    raw: Any = None


@dataclass(slots=True)
class PropertyValue:
    type: int | None = None
    is_null: bool = False
    value: Value = field(default_factory=Value)


@dataclass(slots=True)
class PropertySet:
    keys: list[str] = field(default_factory=list)
    values: list[PropertyValue] = field(default_factory=list)


@dataclass(slots=True)
class MetaData:
    is_multi_part: bool | None = None
    content_type: str | None = None
    size: int | None = None
    seq: int | None = None
    file_name: str | None = None
    file_type: str | None = None
    md5: str | None = None
    description: str | None = None


@dataclass(slots=True)
class DataSet:
    num_of_columns: int | None = None
    columns: list[str] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    rows: list[list[Value]] = field(default_factory=list)


@dataclass(slots=True)
class Parameter:
    name: str | None = None
    type: int | None = None
    value: Value = field(default_factory=Value)


@dataclass(slots=True)
class Template:
    version: str | None = None
    metrics: list[Metric] = field(default_factory=list)
    parameters: list[Parameter] = field(default_factory=list)
    template_ref: str | None = None
    is_definition: bool = False


@dataclass(slots=True)
class Metric:
    name: str | None = None
    alias: int | None = None
    timestamp: int | None = None
    datatype: int | None = None
    is_historical: bool = False
    is_transient: bool = False
    is_null: bool = False
    metadata: MetaData | None = None
    properties: PropertySet | None = None
    value: Value = field(default_factory=Value)


@dataclass(slots=True)
class Payload:
    timestamp: int | None = None
    metrics: list[Metric] = field(default_factory=list)
    seq: int | None = None
    uuid: str | None = None
    body: bytes | None = None


# -------------------------------------------------------------------------- the readers

_View = bytes | memoryview


def decode_payload(data: bytes) -> Payload:
    """The payload in ``data``; PayloadError when it is not one."""
    try:
        return _payload(data)
    except WireError as exc:
        raise PayloadError(f"not a Sparkplug B payload: {exc}") from None


def _payload(data: _View) -> Payload:
    payload = Payload()
    for number, wire, value in wire_fields(data, where="payload"):
        if number == 1:
            payload.timestamp = _varint(value, wire, "timestamp")
        elif number == 2:
            payload.metrics.append(
                _metric(_message(value, wire, "metrics"), f"metrics[{len(payload.metrics)}]", 0)
            )
        elif number == 3:
            payload.seq = _varint(value, wire, "seq")
        elif number == 4:
            payload.uuid = _string(value, wire, "uuid")
        elif number == 5:
            payload.body = bytes(_message(value, wire, "body"))
    return payload


def _metric(data: _View, where: str, depth: int) -> Metric:
    _deep(depth, where)
    metric = Metric()
    for number, wire, value in wire_fields(data, where=where):
        if number == 1:
            metric.name = _string(value, wire, f"{where}.name")
        elif number == 2:
            metric.alias = _varint(value, wire, f"{where}.alias")
        elif number == 3:
            metric.timestamp = _varint(value, wire, f"{where}.timestamp")
        elif number == 4:
            metric.datatype = _varint(value, wire, f"{where}.datatype")
        elif number == 5:
            metric.is_historical = _bool(value, wire, f"{where}.is_historical")
        elif number == 6:
            metric.is_transient = _bool(value, wire, f"{where}.is_transient")
        elif number == 7:
            metric.is_null = _bool(value, wire, f"{where}.is_null")
        elif number == 8:
            metric.metadata = _metadata(
                _message(value, wire, f"{where}.metadata"), f"{where}.metadata"
            )
        elif number == 9:
            metric.properties = _property_set(
                _message(value, wire, f"{where}.properties"), f"{where}.properties", depth + 1
            )
        elif 10 <= number <= 19:
            _set_once(metric.value, where)
            metric.value.field = number
            metric.value.raw = _metric_value(number, wire, value, where, depth)
    return metric


def _metric_value(number: int, wire: int, value: int | _View, where: str, depth: int) -> Any:
    name = f"{where}.{METRIC_VALUE_FIELDS[number]}"
    if number <= 15:
        return _scalar_value(number, wire, value, name, 10)
    if number == 16:
        return bytes(_message(value, wire, name))
    if number == 17:
        return _dataset(_message(value, wire, name), name, depth + 1)
    if number == 18:
        return _template(_message(value, wire, name), name, depth + 1)
    return bytes(_message(value, wire, name))  # an extension: its bytes, unread


METRIC_VALUE_FIELDS = {
    10: "int_value",
    11: "long_value",
    12: "float_value",
    13: "double_value",
    14: "boolean_value",
    15: "string_value",
    16: "bytes_value",
    17: "dataset_value",
    18: "template_value",
    19: "extension_value",
}
"""The fields of ``Metric.value`` (the ``oneof``), by number."""


def _scalar_value(number: int, wire: int, value: int | _View, name: str, first: int) -> Any:
    """A ``oneof`` of the scalar kinds numbered from ``first``: int, long, float, double, bool,
    string, extension (data set values, template parameters, property values)."""
    kind = number - first
    if kind in (0, 1):
        return _varint(value, wire, name)
    if kind == 2:
        return _float(value, wire, name)
    if kind == 3:
        return _double(value, wire, name)
    if kind == 4:
        return _bool(value, wire, name)
    if kind == 5:
        return _string(value, wire, name)
    return bytes(_message(value, wire, name))


def _dataset(data: _View, where: str, depth: int) -> DataSet:
    _deep(depth, where)
    dataset = DataSet()
    for number, wire, value in wire_fields(data, where=where):
        if number == 1:
            dataset.num_of_columns = _varint(value, wire, f"{where}.num_of_columns")
        elif number == 2:
            dataset.columns.append(_string(value, wire, f"{where}.columns"))
        elif number == 3:
            if wire == LENGTH:  # packed
                dataset.types.extend(packed_varints(_message(value, wire, f"{where}.types")))
            else:
                dataset.types.append(_varint(value, wire, f"{where}.types"))
        elif number == 4:
            row_where = f"{where}.rows[{len(dataset.rows)}]"
            row: list[Value] = []
            for cell_number, cell_wire, cell in wire_fields(
                _message(value, wire, row_where), where=row_where
            ):
                if cell_number == 1:
                    cell_where = f"{row_where}.elements[{len(row)}]"
                    element = Value()
                    for n, w, v in wire_fields(
                        _message(cell, cell_wire, cell_where), where=cell_where
                    ):
                        if 1 <= n <= 7:
                            _set_once(element, cell_where)
                            element.field = n
                            element.raw = _scalar_value(n, w, v, cell_where, 1)
                    row.append(element)
            dataset.rows.append(row)
    return dataset


def _template(data: _View, where: str, depth: int) -> Template:
    _deep(depth, where)
    template = Template()
    for number, wire, value in wire_fields(data, where=where):
        if number == 1:
            template.version = _string(value, wire, f"{where}.version")
        elif number == 2:
            template.metrics.append(
                _metric(
                    _message(value, wire, f"{where}.metrics"),
                    f"{where}.metrics[{len(template.metrics)}]",
                    depth + 1,
                )
            )
        elif number == 3:
            p_where = f"{where}.parameters[{len(template.parameters)}]"
            parameter = Parameter()
            for n, w, v in wire_fields(_message(value, wire, p_where), where=p_where):
                if n == 1:
                    parameter.name = _string(v, w, f"{p_where}.name")
                elif n == 2:
                    parameter.type = _varint(v, w, f"{p_where}.type")
                elif 3 <= n <= 9:
                    _set_once(parameter.value, p_where)
                    parameter.value.field = n
                    parameter.value.raw = _scalar_value(n, w, v, p_where, 3)
            template.parameters.append(parameter)
        elif number == 4:
            template.template_ref = _string(value, wire, f"{where}.template_ref")
        elif number == 5:
            template.is_definition = _bool(value, wire, f"{where}.is_definition")
    return template


def _property_set(data: _View, where: str, depth: int) -> PropertySet:
    _deep(depth, where)
    props = PropertySet()
    for number, wire, value in wire_fields(data, where=where):
        if number == 1:
            props.keys.append(_string(value, wire, f"{where}.keys"))
        elif number == 2:
            v_where = f"{where}.values[{len(props.values)}]"
            props.values.append(_property_value(_message(value, wire, v_where), v_where, depth))
    if len(props.keys) != len(props.values):
        raise PayloadError(
            f"{where} has {len(props.keys)} keys and {len(props.values)} values: a property "
            "set pairs them one to one (Sparkplug 3.0 section 6.4.8)"
        )
    return props


def _property_value(data: _View, where: str, depth: int) -> PropertyValue:
    prop = PropertyValue()
    for number, wire, value in wire_fields(data, where=where):
        if number == 1:
            prop.type = _varint(value, wire, f"{where}.type")
        elif number == 2:
            prop.is_null = _bool(value, wire, f"{where}.is_null")
        elif 3 <= number <= 8:
            _set_once(prop.value, where)
            prop.value.field = number
            prop.value.raw = _scalar_value(number, wire, value, where, 3)
        elif number == 9:
            _set_once(prop.value, where)
            prop.value.field = number
            prop.value.raw = _property_set(
                _message(value, wire, where), f"{where}.propertyset_value", depth + 1
            )
        elif number == 10:
            _set_once(prop.value, where)
            prop.value.field = number
            sets: list[PropertySet] = []
            for n, w, v in wire_fields(
                _message(value, wire, where), where=f"{where}.propertysets_value"
            ):
                if n == 1:
                    sets.append(
                        _property_set(
                            _message(v, w, where),
                            f"{where}.propertysets_value[{len(sets)}]",
                            depth + 1,
                        )
                    )
            prop.value.raw = sets
        elif number == 11:
            _set_once(prop.value, where)
            prop.value.field = number
            prop.value.raw = bytes(_message(value, wire, where))
    return prop


def _metadata(data: _View, where: str) -> MetaData:
    meta = MetaData()
    for number, wire, value in wire_fields(data, where=where):
        name = f"{where}.{_META_NAMES.get(number, number)}"
        if number == 1:
            meta.is_multi_part = _bool(value, wire, name)
        elif number == 2:
            meta.content_type = _string(value, wire, name)
        elif number == 3:
            meta.size = _varint(value, wire, name)
        elif number == 4:
            meta.seq = _varint(value, wire, name)
        elif number == 5:
            meta.file_name = _string(value, wire, name)
        elif number == 6:
            meta.file_type = _string(value, wire, name)
        elif number == 7:
            meta.md5 = _string(value, wire, name)
        elif number == 8:
            meta.description = _string(value, wire, name)
    return meta


_META_NAMES = {
    1: "is_multi_part",
    2: "content_type",
    3: "size",
    4: "seq",
    5: "file_name",
    6: "file_type",
    7: "md5",
    8: "description",
}


# -------------------------------------------------------------------------- field kinds


def _wrong(wire: int, want: str, where: str) -> PayloadError:
    return PayloadError(f"{where} has wire type {wire}; a {want} field has another")


def _varint(value: int | _View, wire: int, where: str) -> int:
    if wire != VARINT or not isinstance(value, int):
        raise _wrong(wire, "varint", where)
    return value


def _bool(value: int | _View, wire: int, where: str) -> bool:
    return _varint(value, wire, where) != 0


def _float(value: int | _View, wire: int, where: str) -> float:
    if wire != FIXED32 or not isinstance(value, int):
        raise _wrong(wire, "float", where)
    return as_float(value)


def _double(value: int | _View, wire: int, where: str) -> float:
    if wire != FIXED64 or not isinstance(value, int):
        raise _wrong(wire, "double", where)
    return as_double(value)


def _message(value: int | _View, wire: int, where: str) -> _View:
    if wire != LENGTH or isinstance(value, int):
        raise _wrong(wire, "length-delimited", where)
    return value


def _string(value: int | _View, wire: int, where: str) -> str:
    try:
        return as_text(_message(value, wire, where), where)
    except WireError as exc:
        raise PayloadError(str(exc)) from None


def _set_once(value: Value, where: str) -> None:
    if value.field is not None:
        raise PayloadError(f"{where} sets more than one field of its oneof value")


def _deep(depth: int, where: str) -> None:
    if depth > MAX_DEPTH:
        raise PayloadError(f"{where} is nested more than {MAX_DEPTH} deep")


# -------------------------------------------------------------------------- compression

COMPRESSED_UUID = "SPBV1.0_COMPRESSED"
"""The ``uuid`` of a payload whose ``body`` is another payload, compressed (Sparkplug 3.0
section 6.4.3); its ``algorithm`` metric says how: DEFLATE (the default) or GZIP."""

DEFAULT_DECOMPRESSED_LIMIT = 16 * 1024 * 1024
"""The most bytes a compressed payload may inflate to: a larger one is refused (a small
message cannot make the reader hold a huge one)."""


def decode_message(data: bytes, limit: int = DEFAULT_DECOMPRESSED_LIMIT) -> Payload:
    """The payload of a Sparkplug message: ``data`` decoded, and when it is a compressed
    payload, its body inflated (at most ``limit`` bytes) and decoded."""
    outer = decode_payload(data)
    if outer.uuid != COMPRESSED_UUID:
        return outer
    algorithm = "DEFLATE"
    for metric in outer.metrics:
        if metric.name == "algorithm" and isinstance(metric.value.raw, str):
            algorithm = metric.value.raw.upper()
    if outer.body is None:
        raise PayloadError(f"a {COMPRESSED_UUID} payload without a body")
    return decode_payload(inflate(outer.body, algorithm, limit))


def inflate(body: bytes, algorithm: str, limit: int) -> bytes:
    """``body`` decompressed with ``algorithm`` (DEFLATE: zlib's stream, GZIP), refusing more
    than ``limit`` bytes of output."""
    import zlib

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
