"""Sparkplug B payloads built with an independent implementation: the protobuf classes the
``pysparkplug`` wheel ships (generated from Eclipse Tahu's ``sparkplug_b.proto``), never the
product's decoder. For tests that check our reader against them, and for the benchmarks'
Sparkplug backlogs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def pb() -> Any:
    """pysparkplug's generated module (``Payload``, ``Metric``, ...)."""
    return importlib.import_module("pysparkplug._protobuf")


def payload(
    metrics: list[dict[str, Any]], *, seq: int | None = None, timestamp: int | None = None
) -> bytes:
    """A serialized Payload whose metrics are given as dicts of Metric fields (``name``,
    ``alias``, ``datatype``, ``int_value``, ...; ``properties`` as a dict of key -> (type,
    field, value))."""
    message = pb().Payload()
    if seq is not None:
        message.seq = seq
    if timestamp is not None:
        message.timestamp = timestamp
    for fields in metrics:
        metric = message.metrics.add()
        for key, value in fields.items():
            if key == "properties":
                for prop_key, (prop_type, field, prop_value) in value.items():
                    metric.properties.keys.append(prop_key)
                    item = metric.properties.values.add()
                    item.type = prop_type
                    setattr(item, field, prop_value)
            else:
                setattr(metric, key, value)
    return message.SerializeToString()


def birth(metrics: list[tuple[str, int, int, str, Any]], bd_seq: int, seq: int = 0) -> bytes:
    """An NBIRTH or DBIRTH: (name, alias, datatype, value field, value) per metric, and the
    bdSeq metric (Int64) first when ``bd_seq`` is not negative."""
    rows: list[dict[str, Any]] = []
    if bd_seq >= 0:
        rows.append({"name": "bdSeq", "datatype": 4, "long_value": bd_seq})
    for name, alias, datatype, field, value in metrics:
        rows.append({"name": name, "alias": alias, "datatype": datatype, field: value})
    return payload(rows, seq=seq, timestamp=1_700_000_000_000)


def data(values: list[tuple[int, str, Any]], seq: int) -> bytes:
    """A DATA message by alias: (alias, value field, value) per metric."""
    return payload(
        [
            {"alias": alias, field: value, "timestamp": 1_700_000_000_001}
            for alias, field, value in values
        ],
        seq=seq,
        timestamp=1_700_000_000_001,
    )


def death(bd_seq: int) -> bytes:
    return payload(
        [{"name": "bdSeq", "datatype": 4, "long_value": bd_seq}], timestamp=1_700_000_000_002
    )


def rich_payload() -> bytes:
    """A payload that sets every field of every message type once."""
    message = pb().Payload(timestamp=1_700_000_000_000, seq=255, uuid="u-1", body=b"raw")
    m = message.metrics.add()
    m.name, m.alias, m.timestamp, m.datatype = "a/b", 7, 1_700_000_000_001, 3
    m.is_historical, m.is_transient, m.is_null = True, True, False
    m.int_value = 4294967295
    md = m.metadata
    md.is_multi_part, md.content_type, md.size, md.seq = True, "text/plain", 10, 2
    md.file_name, md.file_type, md.md5, md.description = "f.txt", "txt", "abc", "desc"
    m.properties.keys.extend(["Quality", "nested", "list"])
    q = m.properties.values.add()
    q.type, q.int_value = 3, 192
    nested = m.properties.values.add()
    nested.type = 20
    nested.propertyset_value.keys.append("engUnit")
    unit = nested.propertyset_value.values.add()
    unit.type, unit.string_value = 12, "degC"
    listed = m.properties.values.add()
    listed.type = 21
    one = listed.propertysets_value.propertyset.add()
    one.keys.append("x")
    x = one.values.add()
    x.type, x.is_null = 3, True
    ds = message.metrics.add()
    ds.name, ds.datatype = "table", 16
    ds.dataset_value.num_of_columns = 3
    ds.dataset_value.columns.extend(["i", "s", "f"])
    ds.dataset_value.types.extend([3, 12, 9])
    row = ds.dataset_value.rows.add()
    row.elements.add().int_value = 4294967295
    row.elements.add().string_value = "x"
    row.elements.add().float_value = 1.5
    tm = message.metrics.add()
    tm.name, tm.datatype = "udt", 19
    tm.template_value.version, tm.template_value.template_ref = "v1", "Motor"
    tm.template_value.is_definition = False
    param = tm.template_value.parameters.add()
    param.name, param.type, param.int_value = "p", 7, 5
    inner = tm.template_value.metrics.add()
    inner.name, inner.datatype, inner.double_value = "rpm", 10, 3000.5
    for name, datatype, field, value in (
        ("l", 4, "long_value", 2**64 - 1),
        ("d", 10, "double_value", -0.25),
        ("b", 11, "boolean_value", True),
        ("bytes", 17, "bytes_value", b"\x00\xff"),
    ):
        extra = message.metrics.add()
        extra.name, extra.datatype = name, datatype
        setattr(extra, field, value)
    return message.SerializeToString()


ROW_KEY = (
    "message_type",
    "device_id",
    "seq",
    "bd_seq",
    "metric_index",
    "metric_name",
    "alias",
    "datatype",
    "long_value",
    "double_value",
    "death_matched",
    "reason",
)
"""The columns that say what a Sparkplug row decoded to, whatever its offset and receive time:
tests compare a table with the pure decoder's rows of the same messages by these."""


def row_key(get: Callable[[str], Any]) -> tuple[Any, ...]:
    """A row's :data:`ROW_KEY` values; ``get`` reads a column of the row."""
    return tuple(get(name) for name in ROW_KEY)
