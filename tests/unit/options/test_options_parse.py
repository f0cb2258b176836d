"""SourceOptions parsing without Spark: defaults, errors naming the option, secrets."""

from __future__ import annotations

import pytest

from connector.options.source import InvalidOptionError, SourceOptions

BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": "plant/+/telemetry"}


def test_defaults_follow_the_design() -> None:
    opts = SourceOptions.parse(BASE)
    assert opts.qos == 1
    assert opts.clean_session is False
    assert str(opts.mqtt_version) == "3.1.1"
    assert opts.fail_on_data_loss is True
    assert opts.partition_data == "inline"
    assert opts.client_id.startswith("spark-mqtt-") and len(opts.client_id) <= 23
    # Stable: the same query gets the same client id every time.
    assert SourceOptions.parse(BASE).client_id == opts.client_id


def test_option_names_are_case_insensitive() -> None:
    opts = SourceOptions.parse({"brokerurl": "tcp://h", "TOPICS": "a/#, b/+", "QOS": "2"})
    assert opts.topics == ("a/#", "b/+")
    assert opts.qos == 2


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"brokerUrl": ""}, "brokerUrl"),
        ({"brokerUrl": "http://h"}, "brokerUrl"),
        ({"qos": "3"}, "qos"),
        ({"topic": "a/#/b"}, "topic"),
        ({"topics": "a"}, "topics"),
        ({"mqttVersion": "6"}, "mqttVersion"),
        ({"maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
        ({"tls.caFile": "/nonexistent"}, "tls."),
        ({"password": "pw"}, "username"),
        ({"keepAlive": "x"}, "keepAlive"),
        ({"partitionData": "disk"}, "partitionData"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"availableNowMaxWait": "soon"}, "availableNowMaxWait"),
    ],
)
def test_invalid_options_name_the_option(extra: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidOptionError, match=named):
        SourceOptions.parse({**BASE, **extra})


def test_credentials_in_the_url_are_refused_without_echo() -> None:
    with pytest.raises(InvalidOptionError) as info:
        SourceOptions.parse({**BASE, "brokerUrl": "tcp://user:s3cr3t-pw@h:1883"})
    assert "s3cr3t-pw" not in str(info.value)
    assert "credentials" in str(info.value)


def test_password_never_in_repr_or_redacted_view() -> None:
    opts = SourceOptions.parse(
        {**BASE, "brokerUrl": "ssl://h:8883", "username": "u", "password": "s3cr3t-pw"}
    )
    assert "s3cr3t-pw" not in repr(opts)
    assert "s3cr3t-pw" not in str(opts.redacted())


@pytest.mark.parametrize(
    "url",
    [
        "tcp://broker.example:1883",
        "mqtt://broker.example",
        "tcp://127.0.0.1:1883",
        "tcp://localhost:1883",
        "tcp://[::1]:1883",
    ],
)
def test_password_over_plain_tcp_needs_an_explicit_opt_in(url: str) -> None:
    """No host is exempt, loopback included: the error says how to opt in or use TLS."""
    creds = {"brokerUrl": url, "username": "u", "password": "pw-never-shown"}
    with pytest.raises(InvalidOptionError) as refused:
        SourceOptions.parse({**BASE, **creds})
    message = str(refused.value)
    assert "unencrypted" in message and "tcp://" in message
    assert "ssl://" in message and "'allowPasswordOverPlainTcp' to true" in message
    assert "pw-never-shown" not in message
    opted_in = SourceOptions.parse({**BASE, **creds, "allowPasswordOverPlainTcp": "true"})
    assert opted_in.password == "pw-never-shown"
    with pytest.raises(InvalidOptionError):
        SourceOptions.parse({**BASE, **creds, "allowPasswordOverPlainTcp": "false"})


@pytest.mark.parametrize("url", ["ssl://broker.example:8883", "mqtts://127.0.0.1"])
def test_password_over_tls_needs_no_opt_in(url: str) -> None:
    opts = SourceOptions.parse({**BASE, "brokerUrl": url, "username": "u", "password": "pw"})
    assert opts.tls is not None and opts.tls.verify  # verification is on by default
    assert opts.password == "pw"


def test_user_name_without_password_over_plain_tcp_is_fine() -> None:
    assert SourceOptions.parse({**BASE, "username": "u"}).password is None


def test_mqtt_3_1_limits_client_ids_to_23_characters() -> None:
    with pytest.raises(InvalidOptionError, match="clientId"):
        SourceOptions.parse({**BASE, "mqttVersion": "3.1", "clientId": "x" * 24})
    assert SourceOptions.parse({**BASE, "mqttVersion": "3.1"}).client_id


def test_max_packet_size_is_checked_and_left_to_the_session_when_absent() -> None:
    from connector.mqtt.config import SessionConfig

    base = {"brokerUrl": "tcp://127.0.0.1:1883", "topic": "a/#"}
    assert SourceOptions.parse(base).max_packet_size is None
    five = SourceOptions.parse({**base, "mqttVersion": "5"})
    config = SessionConfig("x", level=five.mqtt_version, maximum_packet_size=five.max_packet_size)
    assert config.packet_limit == 16 * 1024 * 1024
    opts = SourceOptions.parse({**base, "maxPacketSize": "2048"})
    assert opts.max_packet_size == 2048 and opts.redacted()["maxPacketSize"] == "2048"
    with pytest.raises(InvalidOptionError, match=r"'maxPacketSize' must be 64\.\.268435460"):
        SourceOptions.parse({**base, "maxPacketSize": "63"})


@pytest.mark.parametrize("url", ["broker.example:1883", "broker.example"])
def test_a_broker_url_without_a_scheme_is_refused(url: str) -> None:
    """A bare host would mean plain TCP, which a user of a TLS port did not ask for."""
    with pytest.raises(InvalidOptionError) as refused:
        SourceOptions.parse({**BASE, "brokerUrl": url})
    message = str(refused.value)
    assert f"'{url}' has no scheme" in message
    assert f"tcp://{url}" in message and f"ssl://{url}" in message


@pytest.mark.parametrize(
    ("key", "suggested"),
    [
        ("wal_path", "'walPath'"),
        ("keepalive_seconds", "'keepAlive'"),
        ("brokerURI", "'brokerUrl'"),
        ("maxMessagePerTrigger", "'maxMessagesPerTrigger'"),
        ("TOPIC_S", "'topics'"),
    ],
)
def test_a_misspelt_option_is_refused_with_the_closest_names(key: str, suggested: str) -> None:
    with pytest.raises(InvalidOptionError) as refused:
        SourceOptions.parse({**BASE, key: "x"})
    message = str(refused.value)
    assert message.startswith(f"unknown option {key!r} (did you mean "), message
    assert suggested in message.split("?")[0], message
    assert "docs/options.md" in message


def test_an_unknown_option_far_from_every_name_is_refused_without_a_guess() -> None:
    with pytest.raises(InvalidOptionError, match=r"^unknown option 'zzzzqq': the reader's"):
        SourceOptions.parse({**BASE, "zzzzqq": "1"})


@pytest.mark.parametrize("key", ["path", "paths", "checkpointLocation", "queryname", "PATH"])
def test_the_keys_spark_passes_itself_are_not_options(key: str) -> None:
    assert SourceOptions.parse({**BASE, key: "/somewhere"}).topics == ("plant/+/telemetry",)
