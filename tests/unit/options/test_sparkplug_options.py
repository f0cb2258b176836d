"""``payloadFormat`` ``sparkplug``: its options and the sharding it refuses (an edge node's
messages must reach one receiver, docs/sparkplug.md)."""

from __future__ import annotations

import pytest

from connector.options.source import InvalidOptionError, SourceOptions
from connector.options.table import OPTIONS
from connector.spark.datasource import MqttDataSource
from connector.spark.reader.sparkplug_schema import ARROW_SCHEMA, SCHEMA_DDL

BASE = {"brokerUrl": "tcp://127.0.0.1:1883", "topic": "spBv1.0/#", "payloadFormat": "sparkplug"}


def test_sparkplug_rows_have_their_own_schema() -> None:
    opts = SourceOptions.parse(BASE)
    assert opts.sparkplug and opts.sparkplug_reorder_timeout == 5.0
    assert MqttDataSource(BASE).schema() == SCHEMA_DDL
    assert "properties" not in MqttDataSource({**BASE, "payloadFormat": "mqtt"}).schema()
    for name in ("metric_name", "alias", "long_value", "ulong_value", "offset", "metric_index"):
        assert name in ARROW_SCHEMA.names
    assert str(ARROW_SCHEMA.field("alias").type) == "int64"
    assert str(ARROW_SCHEMA.field("ulong_value").type) == "decimal128(20, 0)"


def test_the_reorder_timeout_is_read_and_kept_in_the_redacted_view() -> None:
    opts = SourceOptions.parse({**BASE, "sparkplugReorderTimeout": "0.5"})
    assert opts.sparkplug_reorder_timeout == 0.5
    assert opts.redacted()["sparkplugReorderTimeout"] == "0.5"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"payloadFormat": "json"}, "payloadFormat"),
        ({"sparkplugReorderTimeout": "-1"}, "sparkplugReorderTimeout"),
        (
            {"payloadFormat": "mqtt", "sparkplugReorderTimeout": "1"},
            "applies only with option 'payloadFormat' sparkplug",
        ),
        ({"topic": "$share/g/spBv1.0/#"}, "shared subscription spreads them"),
        ({"sparkplugHostId": "a/b"}, "'sparkplugHostId' must be a non-empty name"),
        ({"sparkplugHostId": ""}, "'sparkplugHostId' must be a non-empty name"),
        ({"sparkplugRebirthInterval": "5"}, "applies only with option 'sparkplugHostId'"),
        (
            {"payloadFormat": "mqtt", "sparkplugHostId": "scada"},
            "'sparkplugHostId' applies only with option 'payloadFormat' sparkplug",
        ),
        (
            {
                "sparkplugHostId": "scada",
                "receivers": "2",
                "shardBy": "topics",
                "topic": None,
                "topics": "spBv1.0/a/#,spBv1.0/b/#",
            },
            "'sparkplugHostId' needs one receiver",
        ),
        (
            {
                "topic": None,
                "topics": "spBv1.0/a/NDATA/+,spBv1.0/a/NBIRTH/+",
                "receivers": "2",
                "shardBy": "topics",
            },
            "does not take whole edge nodes",
        ),
    ],
)
def test_refused_with_the_reason(extra: dict[str, str | None], message: str) -> None:
    opts = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(InvalidOptionError, match=message):
        SourceOptions.parse(opts)


def test_receivers_that_each_take_whole_edge_nodes_are_accepted() -> None:
    shards = {"receivers": "2", "shardBy": "topics", "brokerUrl": "tcp://127.0.0.1:1883"}
    opts = SourceOptions.parse(
        {
            **shards,
            "payloadFormat": "sparkplug",
            "topics": "spBv1.0/a/#,spBv1.0/b/+/e1/#,spBv1.0/STATE/+",
        }
    )
    assert opts.receivers == 2
    with pytest.raises(InvalidOptionError, match=r"'spBv1.0/b/\+/\+' does not take whole"):
        SourceOptions.parse(
            {**shards, "payloadFormat": "sparkplug", "topics": "spBv1.0/a/#,spBv1.0/b/+/+"}
        )


def test_the_host_options_are_read_and_kept_in_the_redacted_view() -> None:
    opts = SourceOptions.parse({**BASE, "sparkplugHostId": "scada"})
    default = float(OPTIONS["sparkplugRebirthInterval"].default or "nan")
    assert (opts.sparkplug_host_id, opts.sparkplug_rebirth_interval) == ("scada", default)
    assert opts.redacted()["sparkplugHostId"] == "scada"
    assert SourceOptions.parse(BASE).sparkplug_host_id is None
    again = SourceOptions.parse({**BASE, "sparkplugHostId": "h", "sparkplugRebirthInterval": "2"})
    assert again.sparkplug_rebirth_interval == 2.0
