"""Sparkplug B datatypes (Sparkplug 3.0 section 6.4.16, the ``DataType`` enum) and the value of
a metric of each, from the ``oneof`` field that carried it.

Integers travel in unsigned protocol buffers fields: Int8, Int16, Int32, UInt8, UInt16 and
UInt32 in ``int_value`` (uint32), Int64, UInt64 and DateTime in ``long_value`` (uint64). Writers
disagree on how a negative value is put there: Eclipse Tahu's Java and JavaScript sign-extend
Int8 -1 to 32 bits (4294967295), Tahu's Python and pysparkplug send the 8-bit pattern (255); an
UInt32 may come in ``long_value``. The one rule that reads all of them: mask to the type's width,
then sign-extend the signed types. DateTime is milliseconds since the epoch, UTC. Array types
(22-34) are little-endian packed bytes in ``bytes_value`` (section 6.4.17: BooleanArray a 4-byte
count, then the bits, most significant first; StringArray NUL-terminated UTF-8 strings).
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any


class DataType(IntEnum):
    Unknown = 0
    Int8 = 1
    Int16 = 2
    Int32 = 3
    Int64 = 4
    UInt8 = 5
    UInt16 = 6
    UInt32 = 7
    UInt64 = 8
    Float = 9
    Double = 10
    Boolean = 11
    String = 12
    DateTime = 13
    Text = 14
    UUID = 15
    DataSet = 16
    Bytes = 17
    File = 18
    Template = 19
    PropertySet = 20
    PropertySetList = 21
    Int8Array = 22
    Int16Array = 23
    Int32Array = 24
    Int64Array = 25
    UInt8Array = 26
    UInt16Array = 27
    UInt32Array = 28
    UInt64Array = 29
    FloatArray = 30
    DoubleArray = 31
    BooleanArray = 32
    StringArray = 33
    DateTimeArray = 34


class DatatypeError(ValueError):
    """A metric value that its datatype cannot hold (wrong field, bytes of the wrong length)."""


INT_WIDTHS = {
    DataType.Int8: (8, True),
    DataType.Int16: (16, True),
    DataType.Int32: (32, True),
    DataType.Int64: (64, True),
    DataType.UInt8: (8, False),
    DataType.UInt16: (16, False),
    DataType.UInt32: (32, False),
    DataType.UInt64: (64, False),
    DataType.DateTime: (64, False),
}
"""Bits and signedness of each integer datatype (DateTime: unsigned milliseconds)."""

ARRAY_ITEMS: dict[DataType, struct.Struct] = {
    DataType.Int8Array: struct.Struct("<b"),
    DataType.Int16Array: struct.Struct("<h"),
    DataType.Int32Array: struct.Struct("<i"),
    DataType.Int64Array: struct.Struct("<q"),
    DataType.UInt8Array: struct.Struct("<B"),
    DataType.UInt16Array: struct.Struct("<H"),
    DataType.UInt32Array: struct.Struct("<I"),
    DataType.UInt64Array: struct.Struct("<Q"),
    DataType.FloatArray: struct.Struct("<f"),
    DataType.DoubleArray: struct.Struct("<d"),
    DataType.DateTimeArray: struct.Struct("<q"),
}
"""The packed item of each fixed-width array type (section 6.4.17)."""

_FIELD_OF: dict[DataType, tuple[int, ...]] = {
    **{t: (10, 11) for t in INT_WIDTHS},
    DataType.Float: (12,),
    DataType.Double: (13,),
    DataType.Boolean: (14,),
    DataType.String: (15,),
    DataType.Text: (15,),
    DataType.UUID: (15,),
    DataType.Bytes: (16,),
    DataType.File: (16,),
    DataType.DataSet: (17,),
    DataType.Template: (18,),
    **{t: (16,) for t in (*ARRAY_ITEMS, DataType.BooleanArray, DataType.StringArray)},
}
"""The ``Metric.value`` fields (10 int_value ... 18 template_value) a value of each type may
come in; integers in either integer field (see the module docstring)."""


_KINDS: dict[int, DataType] = {int(kind): kind for kind in DataType}


def kind_of(datatype: int) -> DataType | None:
    """The DataType numbered ``datatype``, None for a number the standard does not define
    (a dictionary read: the enum's own lookup costs several times more per metric)."""
    return _KINDS.get(datatype)


def name_of(datatype: int | None) -> str | None:
    """The Sparkplug name of ``datatype`` (``"Int8"``), None for None, ``"Unknown(n)"`` for a
    number the standard does not define."""
    if datatype is None:
        return None
    kind = _KINDS.get(datatype)
    return f"Unknown({datatype})" if kind is None else kind.name


def integer(datatype: DataType, raw: int) -> int:
    """``raw`` from an unsigned field as a value of integer ``datatype``: masked to its width,
    then sign-extended when signed."""
    bits, signed = INT_WIDTHS[datatype]
    value = raw & ((1 << bits) - 1)
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def metric_value(datatype: int, field: int | None, raw: Any) -> Any:
    """The value of a metric of ``datatype`` carried in ``Metric.value`` field ``field`` as
    ``raw`` (None when no field was set): an int, float, bool, str, bytes, a list for the
    array types, or the DataSet / Template message as read. DatatypeError when the field is not
    one the type travels in, or the bytes do not make whole items."""
    if field is None:
        return None
    kind = _KINDS.get(datatype)
    if kind is None:
        raise DatatypeError(f"datatype {datatype} is not a Sparkplug datatype")
    allowed = _FIELD_OF.get(kind)
    if allowed is None:
        raise DatatypeError(f"a {kind.name} metric has no value of its own")
    if field not in allowed:
        raise DatatypeError(f"a {kind.name} value came in field {field}, not {allowed}")
    if kind in INT_WIDTHS:
        return integer(kind, raw)
    if kind in ARRAY_ITEMS:
        return array(kind, raw)
    if kind is DataType.BooleanArray:
        return boolean_array(raw)
    if kind is DataType.StringArray:
        return string_array(raw)
    return raw


def array(kind: DataType, data: bytes) -> list[Any]:
    """A fixed-width array type's packed little-endian bytes as a list."""
    item = ARRAY_ITEMS[kind]
    if len(data) % item.size:
        raise DatatypeError(
            f"a {kind.name} of {len(data)} bytes is not whole items of {item.size} bytes"
        )
    return [value for (value,) in item.iter_unpack(data)]


def boolean_array(data: bytes) -> list[bool]:
    """A BooleanArray: a little-endian 4-byte count, then the bits, most significant first,
    the last byte padded (section 6.4.17)."""
    if len(data) < 4:
        raise DatatypeError(f"a BooleanArray of {len(data)} bytes has no 4-byte count")
    (count,) = struct.unpack_from("<I", data)
    needed = (count + 7) // 8
    if len(data) - 4 != needed:
        raise DatatypeError(
            f"a BooleanArray of {count} values needs {needed} bytes of bits, has {len(data) - 4}"
        )
    return [bool(data[4 + i // 8] & (0x80 >> (i % 8))) for i in range(count)]


def string_array(data: bytes) -> list[str]:
    """A StringArray: UTF-8 strings, each ended by NUL (section 6.4.17)."""
    if not data:
        return []
    if data[-1] != 0:
        raise DatatypeError("a StringArray must end with NUL, the end of its last string")
    try:
        return [part.decode("utf-8") for part in data[:-1].split(b"\x00")]
    except UnicodeDecodeError as exc:
        raise DatatypeError(f"a StringArray holds bytes that are not UTF-8: {exc}") from None
