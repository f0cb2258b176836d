"""Every Sparkplug B datatype (1-19, 22-34) from bytes to the value and column its row holds, and
the signed encodings different writers use (Sparkplug 3.0 sections 6.4.16-6.4.17)."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from connector.sparkplug.datatypes import (
    DataType,
    DatatypeError,
    boolean_array,
    integer,
    metric_value,
    name_of,
    string_array,
)
from connector.sparkplug.payload import decode_payload, optional
from connector.sparkplug.rows import VALUE_COLUMN, Rows
from connector.sparkplug.state import Context, Resolved
from connector.sparkplug.topics import parse_topic
from devtools.sparkplug_payloads import payload, pb

MQTT = {"topic": "spBv1.0/g/NDATA/n", "qos": 0, "timestamp": 1, "offset": 7, "receiver": 0}


def _row(metric: dict[str, Any]) -> dict[str, Any]:
    """The row of one metric (its datatype in the metric), built from bytes the oracle wrote."""
    decoded = decode_payload(payload([metric], seq=1))
    rows = Rows()
    only = decoded.metrics[0]
    rows.add(
        MQTT,
        parse_topic("spBv1.0/g/NDATA/n"),
        decoded,
        Context(metrics=[Resolved(optional(only, "name"), optional(only, "datatype"))]),
    )
    assert len(rows) == 1
    return {name: column[0] for name, column in rows.columns.items()}


def _rows_of(data: bytes) -> Rows:
    """The rows of an NDATA payload whose metrics carry their names and datatypes."""
    decoded = decode_payload(data)
    rows = Rows()
    rows.add(
        MQTT,
        parse_topic("spBv1.0/g/NDATA/n"),
        decoded,
        Context(
            metrics=[
                Resolved(optional(m, "name"), optional(m, "datatype")) for m in decoded.metrics
            ]
        ),
    )
    return rows


# (datatype, value field, value as sent, column, value in the row)
SCALARS: list[tuple[DataType, str, Any, str, Any]] = [
    (DataType.Int8, "int_value", 127, "long_value", 127),
    (DataType.Int8, "int_value", 0xFF, "long_value", -1),  # Tahu Python, pysparkplug
    (DataType.Int8, "int_value", 0xFFFFFFFF, "long_value", -1),  # Tahu Java and JS
    (DataType.Int8, "int_value", 0x80, "long_value", -128),
    (DataType.Int16, "int_value", 0xFFFE, "long_value", -2),
    (DataType.Int16, "int_value", 0xFFFFFFFE, "long_value", -2),
    (DataType.Int16, "int_value", 32767, "long_value", 32767),
    (DataType.Int32, "int_value", 0xFFFFFFFB, "long_value", -5),
    (DataType.Int32, "int_value", 0x7FFFFFFF, "long_value", 2**31 - 1),
    (DataType.Int32, "long_value", 0xFFFFFFFFFFFFFFFB, "long_value", -5),
    (DataType.Int64, "long_value", 0xFFFFFFFFFFFFFFF9, "long_value", -7),
    (DataType.Int64, "long_value", 2**63 - 1, "long_value", 2**63 - 1),
    (DataType.UInt8, "int_value", 255, "long_value", 255),
    (DataType.UInt16, "int_value", 65535, "long_value", 65535),
    (DataType.UInt32, "int_value", 0xFFFFFFFF, "long_value", 4294967295),
    (DataType.UInt32, "long_value", 0xFFFFFFFF, "long_value", 4294967295),
    (DataType.UInt64, "long_value", 2**64 - 1, "ulong_value", 2**64 - 1),
    (DataType.UInt64, "long_value", 5, "ulong_value", 5),
    (DataType.Float, "float_value", 1.5, "double_value", 1.5),
    (DataType.Double, "double_value", -2.25, "double_value", -2.25),
    (DataType.Boolean, "boolean_value", True, "boolean_value", True),
    (DataType.Boolean, "boolean_value", False, "boolean_value", False),
    (DataType.String, "string_value", "héllo", "string_value", "héllo"),
    (DataType.DateTime, "long_value", 1_700_000_000_123, "datetime_value", 1_700_000_000_123_000),
    (DataType.Text, "string_value", "a\nb", "string_value", "a\nb"),
    (DataType.UUID, "string_value", "6f1c-uuid", "string_value", "6f1c-uuid"),
    (DataType.Bytes, "bytes_value", b"\x00\xff", "bytes_value", b"\x00\xff"),
    (DataType.File, "bytes_value", b"file", "bytes_value", b"file"),
]


@pytest.mark.parametrize(("datatype", "field", "sent", "column", "value"), SCALARS)
def test_scalar_values_land_in_their_column(
    datatype: DataType, field: str, sent: Any, column: str, value: Any
) -> None:
    row = _row({"name": "m", "alias": 3, "datatype": int(datatype), field: sent})
    assert VALUE_COLUMN[datatype] == column
    assert row[column] == value
    assert row["datatype"] == datatype.name
    assert row["reason"] is None
    assert not row["is_null"]
    others = [c for c in VALUE_COLUMN.values() if c != column and row[c] is not None]
    assert others == []


def _pack(fmt: str, values: list[Any]) -> bytes:
    return struct.pack(f"<{len(values)}{fmt}", *values)


# (datatype, packed bytes as Tahu and pysparkplug write them, column, value in the row)
ARRAYS: list[tuple[DataType, bytes, str, Any]] = [
    (DataType.Int8Array, _pack("b", [-1, 0, 127]), "long_array", [-1, 0, 127]),
    (DataType.Int16Array, _pack("h", [-2, 300]), "long_array", [-2, 300]),
    (DataType.Int32Array, _pack("i", [-5, 2**31 - 1]), "long_array", [-5, 2**31 - 1]),
    (DataType.Int64Array, _pack("q", [-7, 2**63 - 1]), "long_array", [-7, 2**63 - 1]),
    (DataType.UInt8Array, _pack("B", [255, 1]), "long_array", [255, 1]),
    (DataType.UInt16Array, _pack("H", [65535]), "long_array", [65535]),
    (DataType.UInt32Array, _pack("I", [2**32 - 1, 0]), "long_array", [2**32 - 1, 0]),
    (DataType.UInt64Array, _pack("Q", [2**64 - 1]), "ulong_array", [2**64 - 1]),
    (DataType.FloatArray, _pack("f", [1.5, -0.5]), "double_array", [1.5, -0.5]),
    (DataType.DoubleArray, _pack("d", [1e300]), "double_array", [1e300]),
    (
        DataType.BooleanArray,
        (10).to_bytes(4, "little") + bytes([0b1010_0000, 0b0100_0000]),
        "boolean_array",
        [True, False, True, False, False, False, False, False, False, True],
    ),
    (DataType.StringArray, b"ab\x00\x00c\x00", "string_array", ["ab", "", "c"]),
    (
        DataType.DateTimeArray,
        _pack("q", [1_700_000_000_000, 0]),
        "datetime_array",
        [1_700_000_000_000_000, 0],
    ),
]


@pytest.mark.parametrize(("datatype", "packed", "column", "value"), ARRAYS)
def test_array_values_land_in_their_column(
    datatype: DataType, packed: bytes, column: str, value: Any
) -> None:
    row = _row({"name": "a", "datatype": int(datatype), "bytes_value": packed})
    assert VALUE_COLUMN[datatype] == column
    assert row[column] == value
    assert row["reason"] is None


def test_the_array_encodings_match_pysparkplugs() -> None:
    """pysparkplug's own array encoders (an independent implementation) write what we read."""
    from pysparkplug import DataType as Theirs

    samples: dict[DataType, Any] = {
        DataType.Int8Array: (-1, 2),
        DataType.UInt16Array: (65535, 7),
        DataType.Int64Array: (-(2**63), 5),
        DataType.DoubleArray: (0.25, -8.0),
        DataType.BooleanArray: (True, True, False, True, False, False, False, False, True),
        DataType.StringArray: ("x", "yz"),
    }
    for ours, values in samples.items():
        packed = Theirs(int(ours)).encode(values)
        assert metric_value(int(ours), 16, packed) == list(values), ours.name


def test_dataset_and_template_values_are_json() -> None:
    message = pb().Payload()
    metric = message.metrics.add()
    metric.name, metric.datatype = "table", int(DataType.DataSet)
    dataset = metric.dataset_value
    dataset.num_of_columns = 2
    dataset.columns.extend(["n", "s"])
    dataset.types.extend([int(DataType.Int8), int(DataType.String)])
    row = dataset.rows.add()
    row.elements.add().int_value = 0xFFFFFFFF
    row.elements.add().string_value = "x"
    template = message.metrics.add()
    template.name, template.datatype = "udt", int(DataType.Template)
    template.template_value.version = "v1"
    template.template_value.template_ref = "Motor"
    inner = template.template_value.metrics.add()
    inner.name, inner.datatype, inner.int_value = "rpm", int(DataType.Int16), 0xFFFF
    param = template.template_value.parameters.add()
    param.name, param.type, param.int_value = "p", int(DataType.Int8), 0xFE
    rows = _rows_of(message.SerializeToString())
    assert json.loads(rows.columns["dataset_value"][0]) == {
        "columns": ["n", "s"],
        "types": ["Int8", "String"],
        "rows": [[-1, "x"]],
    }
    assert json.loads(rows.columns["template_value"][1]) == {
        "version": "v1",
        "template_ref": "Motor",
        "is_definition": False,
        "parameters": [{"name": "p", "type": "Int8", "value": -2}],
        "metrics": [
            {
                "name": "rpm",
                "alias": None,
                "datatype": "Int16",
                "timestamp": None,
                "is_null": False,
                "value": -1,
            }
        ],
    }


def test_properties_are_json_with_quality_and_eng_unit_promoted() -> None:
    row = _row(
        {
            "name": "t",
            "datatype": int(DataType.Double),
            "double_value": 20.5,
            "properties": {
                "Quality": (int(DataType.Int32), "int_value", 192),
                "engUnit": (int(DataType.String), "string_value", "degC"),
                "offset": (int(DataType.Int8), "int_value", 0xFF),
            },
        }
    )
    assert row["quality"] == 192
    assert row["eng_unit"] == "degC"
    assert row["properties"] == '{"Quality": 192, "engUnit": "degC", "offset": -1}'


@pytest.mark.parametrize(
    ("metric", "reason", "column", "kept"),
    [
        (
            {"name": "m", "datatype": int(DataType.Int8), "string_value": "x"},
            "a Int8 value came in field 15",
            "string_value",
            "x",
        ),
        (
            {"name": "m", "datatype": int(DataType.Int32Array), "bytes_value": b"\x01\x02\x03"},
            "a Int32Array of 3 bytes is not whole items of 4 bytes",
            "bytes_value",
            b"\x01\x02\x03",
        ),
        (
            {"name": "m", "datatype": 77, "int_value": 5},
            "datatype 77 is not a Sparkplug datatype",
            "long_value",
            5,
        ),
        (
            {"name": "m", "datatype": int(DataType.DateTime), "long_value": 2**63},
            "DateTime 9223372036854775808 ms is outside",
            "ulong_value",
            2**63,
        ),
        (
            {"name": "m", "datatype": int(DataType.StringArray), "bytes_value": b"ab"},
            "must end with NUL",
            "bytes_value",
            b"ab",
        ),
    ],
)
def test_a_value_its_datatype_cannot_hold_is_kept_with_a_reason(
    metric: dict[str, Any], reason: str, column: str, kept: Any
) -> None:
    row = _row(metric)
    assert reason in (row["reason"] or "")
    assert row[column] == kept


def test_timestamps_spark_cannot_hold_are_null_with_a_reason() -> None:
    row = _row({"name": "m", "datatype": 3, "int_value": 1, "timestamp": 2**64 - 1})
    assert row["metric_timestamp"] is None
    assert "metric timestamp 18446744073709551615 ms is out of range" in row["reason"]
    assert row["long_value"] == 1


def test_an_alias_above_a_signed_long_is_null_with_a_reason() -> None:
    row = _row({"name": "m", "alias": 2**63, "datatype": 3, "int_value": 1})
    assert row["alias"] is None
    assert "alias 9223372036854775808 is above a signed 64-bit integer" in row["reason"]


def test_a_null_metric_has_no_value() -> None:
    row = _row({"name": "m", "datatype": 3, "is_null": True})
    assert row["is_null"] is True
    assert all(row[c] is None for c in set(VALUE_COLUMN.values()))
    assert row["reason"] is None


def test_integer_masks_then_sign_extends() -> None:
    assert integer(DataType.Int8, 0x1_80) == -128
    assert integer(DataType.UInt8, 0xFFFF) == 255
    assert integer(DataType.Int64, 2**64 - 1) == -1
    assert integer(DataType.DateTime, 5) == 5


def test_boolean_and_string_arrays_refuse_bad_lengths() -> None:
    with pytest.raises(DatatypeError, match="no 4-byte count"):
        boolean_array(b"\x01")
    with pytest.raises(DatatypeError, match="needs 2 bytes of bits, has 1"):
        boolean_array((9).to_bytes(4, "little") + b"\xff")
    assert boolean_array((0).to_bytes(4, "little")) == []
    assert string_array(b"") == []
    with pytest.raises(DatatypeError, match="not UTF-8"):
        string_array(b"\xff\x00")


def test_names_of_datatypes() -> None:
    assert name_of(1) == "Int8"
    assert name_of(34) == "DateTimeArray"
    assert name_of(None) is None
    assert name_of(99) == "Unknown(99)"
    assert {int(t) for t in VALUE_COLUMN} == set(range(1, 20)) | set(range(22, 35))


def test_json_forms_are_valid_json_with_non_finite_floats_as_strings() -> None:
    message = pb().Payload()
    template = message.metrics.add()
    template.name, template.datatype = "udt", int(DataType.Template)
    member = template.template_value.metrics.add()
    member.name, member.datatype, member.double_value = "x", int(DataType.Double), float("nan")
    arr = template.template_value.metrics.add()
    arr.name, arr.datatype = "a", int(DataType.FloatArray)
    arr.bytes_value = struct.pack("<2f", float("inf"), 1.0)
    prop_metric = message.metrics.add()
    prop_metric.name, prop_metric.datatype, prop_metric.double_value = "p", 10, 1.0
    prop_metric.properties.keys.append("limit")
    value = prop_metric.properties.values.add()
    value.type, value.double_value = int(DataType.Double), float("-inf")
    rows = _rows_of(message.SerializeToString())
    members = json.loads(rows.columns["template_value"][0])["metrics"]
    assert [m["value"] for m in members] == ["nan", ["inf", 1.0]]
    assert json.loads(rows.columns["properties"][1]) == {"limit": "-inf"}
