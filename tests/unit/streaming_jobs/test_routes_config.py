"""``[[routes]]`` in the ingest job's config file (streaming_jobs/routes.py): each route checked
as the job's flags are, the rules between routes, and every bad route refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming_jobs.ingest_config import IngestConfig, UsageError, describe, parse_config

TOP = """\
broker = "tcp://127.0.0.1:1883"
checkpoint = "/chk/plant"
qos = 2
"""
TELEMETRY = """
[[routes]]
topic = "plant/+/telemetry"
table = "/tables/telemetry"
payload_format = "json"
schema = "seq BIGINT NOT NULL, temp DOUBLE"
topic_columns = "_,site"
"""
EVENTS = """
[[routes]]
topic = "plant/+/events"
table = "main.iot.events"
payload-format = "text"
"""
RAW = """
[[routes]]
topic = "plant/#"
table = "/tables/raw"
"""


def parse(tmp_path: Path, text: str, *flags: str) -> IngestConfig:
    path = tmp_path / "ingest.toml"
    path.write_text(text)
    config, _ = parse_config(["--config", str(path), *flags], environ={})
    return config


def refused(tmp_path: Path, text: str, *flags: str) -> str:
    with pytest.raises(UsageError) as caught:
        parse(tmp_path, text, *flags)
    return str(caught.value)


def test_each_route_gets_its_table_settings_and_the_job_subscribes_to_their_filters(
    tmp_path: Path,
) -> None:
    text = TOP + 'dead_letter_table = "/tables/dead"\n' + TELEMETRY + EVENTS + RAW
    config = parse(tmp_path, text)
    routes = config.routes
    assert [r.topic for r in routes] == ["plant/+/telemetry", "plant/+/events", "plant/#"]
    telemetry, events, raw = (r.config for r in routes)
    assert (telemetry.payload_format, telemetry.topic_columns) == ("json", (None, "site"))
    assert (events.payload_format, events.table, events.schema) == ("text", "main.iot.events", None)
    assert raw.payload_format == "binary"
    # The shared dead-letter table is the text and JSON routes'; binary rows cannot fail.
    assert (telemetry.dead_letter_table, events.dead_letter_table) == ("/tables/dead",) * 2
    assert raw.dead_letter_table is None
    assert {r.config.qos for r in routes} == {"2"}  # top-level keys reach every route
    assert config.topic == ("plant/#",)
    shown = json.loads(describe(config))
    tables = ["/tables/telemetry", "main.iot.events", "/tables/raw"]
    assert [r["table"] for r in shown["routes"]] == tables
    assert "table" not in shown and "payload-format" not in shown, "the routes' keys only"
    assert shown["dead-letter-table"] == "/tables/dead" and shown["qos"] == "2"


def test_the_routes_filters_are_the_subscription_unless_a_top_level_topic_covers_them(
    tmp_path: Path,
) -> None:
    config = parse(tmp_path, TOP + TELEMETRY + EVENTS)
    assert config.topic == ("plant/+/telemetry", "plant/+/events")
    text = TOP + 'topic = "plant/#"\ndead_letter_table = "/tables/dead"\n' + TELEMETRY + EVENTS
    assert parse(tmp_path, text).topic == ("plant/#",)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # a route an earlier one shadows: both named
        (TOP + RAW + TELEMETRY,
         ["route 2 (topic 'plant/+/telemetry')", "route 1 (topic 'plant/#')"]),
        (TOP + TELEMETRY.replace("schema", "shema"),
         ["route 1", "'shema'", "did you mean 'schema'"]),
        (TOP + TELEMETRY.replace('schema = "seq BIGINT NOT NULL, temp DOUBLE"\n', ""),
         ["route 1 (topic 'plant/+/telemetry')", "needs --schema"]),
        (TOP + TELEMETRY.replace("plant/+/telemetry", "plant/te#"), ["route 1", "'#'"]),
        (TOP + "[[routes]]\ntopic = 'a/#'\n", ["route 1", "'table' is required"]),
        (TOP + 'table = "/t"\n' + TELEMETRY, ["with [[routes]]", "table go into each route"]),
        (TOP + 'topic = "plant/+/telemetry"\n' + TELEMETRY + EVENTS,
         ["route 2 (topic 'plant/+/events')", "does not cover"]),
        (TOP + 'topic = "plant/#"\n' + TELEMETRY,
         ["plant/#", "no route takes", "dead_letter_table"]),
        (TOP + TELEMETRY + EVENTS.replace("main.iot.events", "/tables/telemetry"),
         ["route 2", "route 1", "write one table"]),
        (TOP + "routes = []\n", ["non-empty array"]),
        (TOP + RAW + 'dead_letter_table = "/d"\n', ["route 1", "--dead-letter-table needs"]),
    ],
    ids=["shadowed", "unknown-key", "no-schema", "bad-filter", "no-table", "table-at-top",
         "not-covered", "unrouted-no-dead-letters", "one-table-two-formats", "empty",
         "binary-dead-letters"],
)  # fmt: skip
def test_a_bad_route_fails_naming_it(tmp_path: Path, text: str, words: list[str]) -> None:
    message = refused(tmp_path, text)
    for word in words:
        assert word in message, message


def test_table_flags_on_the_command_line_are_refused_with_routes(tmp_path: Path) -> None:
    message = refused(tmp_path, TOP + TELEMETRY, "--payload-format", "text")
    assert "payload-format go into each route" in message


def test_two_routes_may_share_a_table_with_the_same_settings(tmp_path: Path) -> None:
    second = TELEMETRY.replace("plant/+/telemetry", "lab/+/telemetry")
    config = parse(tmp_path, TOP + TELEMETRY + second)
    assert {r.table for r in config.routes} == {"/tables/telemetry"}


SPARKPLUG = """
[[routes]]
topic = "spBv1.0/#"
table = "/tables/metrics"
payload_format = "sparkplug"
events_table = "/tables/events"
"""


def test_a_sparkplug_route_takes_its_events_table_and_the_top_level_reorder_timeout(
    tmp_path: Path,
) -> None:
    text = TOP + "sparkplug_reorder_timeout = 2.5\n" + TELEMETRY + SPARKPLUG
    telemetry, sparkplug = (r.config for r in parse(tmp_path, text).routes)
    assert (sparkplug.payload_format, sparkplug.events_table) == ("sparkplug", "/tables/events")
    assert sparkplug.sparkplug_reorder_timeout == 2.5
    assert telemetry.sparkplug_reorder_timeout is None and telemetry.events_table is None


def test_sparkplug_settings_without_a_sparkplug_route_or_for_the_host_role_are_refused(
    tmp_path: Path,
) -> None:
    message = refused(tmp_path, TOP + "sparkplug_reorder_timeout = 2\n" + TELEMETRY)
    assert "sparkplug-reorder-timeout goes with a Sparkplug route" in message
    message = refused(tmp_path, TOP + 'sparkplug_host_id = "scada"\n' + SPARKPLUG)
    assert "sparkplug-host-id" in message and "host role runs in a Sparkplug job" in message
    events = TELEMETRY + 'events_table = "/tables/events"\n'
    assert "route 1" in refused(tmp_path, TOP + events)


def test_a_sparkplug_route_needs_each_edge_node_in_one_receiver(tmp_path: Path) -> None:
    shared = 'source_option = ["receivers=2", "shardBy=share"]\n'
    message = refused(tmp_path, TOP + 'client_id = "plant"\n' + shared + TELEMETRY + SPARKPLUG)
    assert "route 2 (topic 'spBv1.0/#')" in message and "shared subscription" in message
    by_topics = 'source_option = ["receivers=2", "shardBy=topics"]\n'
    config = parse(tmp_path, TOP + 'client_id = "plant"\n' + by_topics + TELEMETRY + SPARKPLUG)
    assert [r.config.payload_format for r in config.routes] == ["json", "sparkplug"]
    nodes = SPARKPLUG.replace('"spBv1.0/#"', '"spBv1.0/+/NDATA/#"')
    message = refused(tmp_path, TOP + 'client_id = "plant"\n' + by_topics + TELEMETRY + nodes)
    assert "does not take whole edge nodes" in message
