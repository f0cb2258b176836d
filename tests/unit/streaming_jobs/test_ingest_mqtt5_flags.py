"""The ingest job's MQTT 5 flags, without Spark: ``--mqtt-version 5`` and its session flags
become source options (defaults from the option table, left out unless given), and
``--property-columns`` is checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.mqtt.message_properties import FIELDS
from streaming_jobs.ingest_config import UsageError, parse_config, source_options

BASE = ["--broker", "tcp://127.0.0.1:1883", "--topic", "a/#", "--table", "t", "--checkpoint", "c"]
V5 = [*BASE, "--mqtt-version", "5"]


def test_mqtt5_flags_become_source_options_only_when_given() -> None:
    config, _ = parse_config(V5, environ={})
    assert config.mqtt5
    options = source_options(config)
    assert options["mqttVersion"] == "5"
    assert not {"receiveMaximum", "sessionExpiryInterval", "topicAliasMaximum"} & set(options)
    argv = [*V5, "--receive-maximum", "50", "--session-expiry", "86400"]
    config, _ = parse_config([*argv, "--topic-alias-maximum", "0"], environ={})
    options = source_options(config)
    assert (options["receiveMaximum"], options["sessionExpiryInterval"]) == ("50", "86400")
    assert options["topicAliasMaximum"] == "0"
    config, _ = parse_config(BASE, environ={})
    assert not config.mqtt5 and "receiveMaximum" not in source_options(config)


def test_mqtt5_flags_from_a_config_file(tmp_path: Path) -> None:
    file = tmp_path / "ingest.toml"
    file.write_text(
        'mqtt-version = "5"\nreceive-maximum = 10\nproperty-columns = ["contentType"]\n'
    )
    config, _ = parse_config([*BASE, "--config", str(file)], environ={})
    assert (config.receive_maximum, config.property_columns) == (10, ("contentType",))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*BASE, "--receive-maximum", "10"], "--receive-maximum is an MQTT 5 setting: it needs "
         "--mqtt-version 5 (got 3.1.1)"),
        ([*BASE, "--mqtt-version", "3.1", "--session-expiry", "0"], "--session-expiry is an "
         "MQTT 5 setting: it needs --mqtt-version 5 (got 3.1)"),
        ([*BASE, "--topic-alias-maximum", "3"], "--topic-alias-maximum is an MQTT 5 setting"),
        ([*V5, "--receive-maximum", "0"], "--receive-maximum must be 1..65535, got 0"),
        ([*V5, "--session-expiry", "4294967296"], "--session-expiry must be 0..4294967295"),
        ([*V5, "--topic-alias-maximum", "70000"], "--topic-alias-maximum must be 0..65535"),
        ([*BASE, "--mqtt-version", "6"], "invalid choice: '6'"),
    ],
)  # fmt: skip
def test_bad_mqtt5_flags_fail_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_config(argv, environ={})
    assert message in str(raised.value)


def test_property_columns_are_fields_of_the_properties() -> None:
    config, _ = parse_config([*V5, "--property-columns", "contentType, userProperties"], {})
    assert config.property_columns == ("contentType", "userProperties")
    assert config.as_dict()["property-columns"] == "contentType,userProperties"
    config, _ = parse_config([*V5, "--property-columns", ",".join(FIELDS)], environ={})
    assert config.property_columns == FIELDS
    with pytest.raises(UsageError) as raised:
        parse_config([*V5, "--property-columns", "contentType,topicAlias"], environ={})
    assert "'topicAlias' is not a field of the MQTT 5 properties" in str(raised.value)
    assert "contentType, responseTopic" in str(raised.value), "the valid names are listed"
    with pytest.raises(UsageError, match="contentType given twice"):
        parse_config([*V5, "--property-columns", "contentType,contentType"], environ={})
    with pytest.raises(UsageError, match="--property-columns needs --mqtt-version 5"):
        parse_config([*BASE, "--property-columns", "contentType"], environ={})


def test_max_packet_size_becomes_the_source_option_at_any_level() -> None:
    for argv in (BASE, V5):
        config, _ = parse_config([*argv, "--max-packet-size", "4096"], environ={})
        assert source_options(config)["maxPacketSize"] == "4096"
        config, _ = parse_config(argv, environ={})
        assert "maxPacketSize" not in source_options(config)  # the session's default applies
    with pytest.raises(UsageError, match=r"--max-packet-size must be 64\.\.268435460, got 10"):
        parse_config([*V5, "--max-packet-size", "10"], environ={})
