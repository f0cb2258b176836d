"""The rows of the option table decide: each names the field it fills and what it requires, and
the parsers, the "applies only with" checks and ``redacted()`` loop over them. These tests hold
every row to that: a field is a real attribute and gets the option's value, an option whose
requirement fails is refused with its message, and ``redacted()`` shows every field."""

from __future__ import annotations

import dataclasses

import pytest

from connector.options.source import (
    REDACTED,
    InvalidOptionError,
    SourceOptions,
    _default,
    typed_option,
)
from connector.options.table import OPTIONS, REQUIREMENTS, Option, requiring
from connector.spark.writer.options import SinkOptions

BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": "a/#"}
SINK_BASE = {"brokerUrl": "tcp://broker.example:1883"}
WORKED_OUT_SOURCE = {"wal_path_given", "tls"}
"""SourceOptions fields that no row names: worked out from several options."""
WORKED_OUT_SINK = {"tls"}
CONTEXT = {
    "mqtt5": {"mqttVersion": "5"},
    "sparkplug": {"payloadFormat": "sparkplug"},
    "sparkplugHostId": {"sparkplugHostId": "scada"},
    "shards": {"receivers": "2"},
    "shared": {"shardBy": "share"},
}
"""Options under which each requirement holds."""
TYPED = ("bool", "int", "seconds", "choice", "version", "text")


def context(row: Option) -> dict[str, str]:
    """Options under which ``row`` applies."""
    out: dict[str, str] = {}
    for need in row.requirements:
        out.update(CONTEXT[need])
    return out


def valid(row: Option) -> str:
    """A valid value of ``row`` other than most defaults."""
    if row.kind in ("int", "seconds"):
        low = row.low or 0
        value = low + 1 if row.high is None or low + 1 <= row.high else low
        return str(int(value)) if row.kind == "int" else str(value)
    if row.choices:
        return row.choices[0]
    return "true" if row.kind == "bool" else "scada"


def typed_rows(side: str) -> list[Option]:
    return [
        row
        for row in OPTIONS.values()
        if (row.source_field if side == "read" else row.sink_field) and row.kind in TYPED
    ]


def test_every_requirement_of_a_row_is_known_and_tested() -> None:
    assert set(CONTEXT) == set(REQUIREMENTS)
    for row in OPTIONS.values():
        assert set(row.requirements) <= set(REQUIREMENTS), row.name
        if row.requires:
            assert row.side == "read", f"{row.name}: the writer checks no requirement"
    with pytest.raises(ValueError, match="unknown requirement"):
        Option("x", "bool", "help", requires="never")


def test_every_field_a_row_names_is_a_real_attribute() -> None:
    source = {f.name for f in dataclasses.fields(SourceOptions)}
    sink = {f.name for f in dataclasses.fields(SinkOptions)}
    source_rows = [row.source_field for row in OPTIONS.values() if row.source_field]
    sink_rows = [row.sink_field for row in OPTIONS.values() if row.sink_field]
    assert len(source_rows) == len(set(source_rows)), "one row per SourceOptions field"
    assert len(sink_rows) == len(set(sink_rows)), "one row per SinkOptions field"
    assert set(source_rows) == source - WORKED_OUT_SOURCE
    assert set(sink_rows) == sink - WORKED_OUT_SINK


@pytest.mark.parametrize("row", typed_rows("read"), ids=lambda row: row.name)
def test_each_reader_option_fills_its_field(row: Option) -> None:
    text = valid(row)
    parsed = SourceOptions.parse({**BASE, **context(row), row.name: text})
    assert row.source_field is not None
    assert getattr(parsed, row.source_field) == typed_option({row.name: text}, row.name)


@pytest.mark.parametrize("row", typed_rows("write"), ids=lambda row: row.name)
def test_each_writer_option_fills_its_field(row: Option) -> None:
    text = valid(row)
    parsed = SinkOptions.parse({**SINK_BASE, row.name: text})
    assert row.sink_field is not None
    assert getattr(parsed, row.sink_field) == typed_option({row.name: text}, row.name)


def test_field_defaults_are_the_table_defaults() -> None:
    parsed = SourceOptions.parse(BASE)
    defaults = {f.name: f.default for f in dataclasses.fields(SourceOptions)}
    for row in OPTIONS.values():
        name = row.source_field
        if name and row.default is not None and "mqtt5" not in row.requirements:
            assert defaults[name] == _default(row.name), row.name
            if parsed.applies(row):
                assert getattr(parsed, name) == _default(row.name), row.name


def test_options_that_need_mqtt5_are_none_below_level_5() -> None:
    plain, v5 = SourceOptions.parse(BASE), SourceOptions.parse({**BASE, "mqttVersion": "5"})
    assert requiring("mqtt5")
    for name in requiring("mqtt5"):
        field = OPTIONS[name].source_field
        assert field is not None
        assert getattr(plain, field) is None
        assert getattr(v5, field) == _default(name)


@pytest.mark.parametrize("version", ["3.1", "3.1.1"])
@pytest.mark.parametrize("name", requiring("mqtt5"))
def test_every_mqtt5_option_is_refused_below_level_5(name: str, version: str) -> None:
    value = valid(OPTIONS[name])
    with pytest.raises(InvalidOptionError) as raised:
        SourceOptions.parse({**BASE, "mqttVersion": version, name: value})
    assert str(raised.value) == (
        f"option {name!r} is an MQTT 5 setting: it needs option 'mqttVersion' 5 (got {version})"
    )
    SourceOptions.parse({**BASE, "mqttVersion": "5", name: value})


@pytest.mark.parametrize("name", requiring("sparkplug"))
def test_every_sparkplug_option_is_refused_without_sparkplug(name: str) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        SourceOptions.parse({**BASE, name: valid(OPTIONS[name])})
    message = f"option {name!r} applies only with option 'payloadFormat' sparkplug"
    assert str(raised.value) == message


@pytest.mark.parametrize("name", requiring("sparkplugHostId"))
def test_every_host_option_is_refused_without_a_host_id(name: str) -> None:
    options = {**BASE, "payloadFormat": "sparkplug", name: valid(OPTIONS[name])}
    with pytest.raises(InvalidOptionError) as raised:
        SourceOptions.parse(options)
    assert str(raised.value) == f"option {name!r} applies only with option 'sparkplugHostId'"
    SourceOptions.parse({**options, "sparkplugHostId": "scada"})


@pytest.mark.parametrize("name", requiring("shards"))
def test_shard_options_are_taken_and_unused_with_one_receiver(name: str) -> None:
    parsed = SourceOptions.parse({**BASE, name: valid(OPTIONS[name])})
    assert not parsed.applies(OPTIONS[name])
    assert name not in parsed.redacted()


SHOWN_ALL = [
    {
        **BASE,
        "brokerUrl": "ssl://broker.example:8883",
        "mqttVersion": "5",
        "payloadFormat": "sparkplug",
        "sparkplugHostId": "scada",
        "username": "u",
        "password": "s3cr3t",
        "maxMessagesPerTrigger": "10",
        "minMessagesPerTrigger": "5",
        "maxPacketSize": "4096",
        "sessionExpiryInterval": "60",
    },
    {"brokerUrl": BASE["brokerUrl"], "topics": "a/#,b/#", "receivers": "2", "shardBy": "share"},
]


def test_redacted_shows_every_option_with_a_field() -> None:
    shown: set[str] = set()
    for raw in SHOWN_ALL:
        parsed = SourceOptions.parse(raw)
        out = parsed.redacted()
        expected = {
            row.name
            for row in OPTIONS.values()
            if row.source_field
            and parsed.applies(row)
            and getattr(parsed, row.source_field) is not None
        }
        assert set(out) == expected
        for name in out:
            field = OPTIONS[name].source_field
            assert field is not None
            value = getattr(parsed, field)
            if OPTIONS[name].secret:
                assert out[name] == REDACTED
            elif name in ("brokerUrl", "topics"):
                assert out[name] == (str(value) if name == "brokerUrl" else ",".join(value))
            else:
                assert typed_option({name: out[name]}, name) == value, name
        assert "s3cr3t" not in str(out)
        shown |= set(out)
    assert shown == {row.name for row in OPTIONS.values() if row.source_field}


@pytest.mark.parametrize(
    ("raw", "shown", "left_out"),
    [
        (BASE, {"receivers"}, {*requiring("mqtt5"), *requiring("sparkplug"), "shardBy"}),
        (
            {**BASE, "mqttVersion": "5"},
            {"receiveMaximum", "topicAliasMaximum"},
            {"sessionExpiryInterval", "maxPacketSize", "shareGroup"},  # no value
        ),
        (
            {**BASE, "payloadFormat": "sparkplug"},
            {"payloadFormat", "sparkplugReorderTimeout"},
            {"sparkplugHostId", "sparkplugRebirthInterval", "username", "password"},
        ),
        (
            {"brokerUrl": BASE["brokerUrl"], "topics": "a/#,b/#", "receivers": "2"},
            {"receivers", "shardBy", "shareGroup"},
            set(),
        ),
        (
            {
                "brokerUrl": BASE["brokerUrl"],
                "topics": "a/#,b/#",
                "receivers": "2",
                "shardBy": "topics",
            },
            {"receivers", "shardBy"},
            {"shareGroup"},
        ),
    ],
)
def test_redacted_leaves_out_what_does_not_apply(
    raw: dict[str, str], shown: set[str], left_out: set[str]
) -> None:
    out = SourceOptions.parse(raw).redacted()
    assert shown <= set(out)
    assert not left_out & set(out)
