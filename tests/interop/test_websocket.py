"""MQTT over WebSocket (ws://, wss://) and TLS ALPN against mochi-mqtt (tools/mochi-broker,
built by `make setup`): Debian's Mosquitto 2.0.11 has no WebSocket support.

Publishers are paho-mqtt clients on the broker's plain TCP listener; our client (or the
receiver, or `python -m connector.mqtt sub`) reads over the WebSocket or TLS listener of the
same broker, all on 127.0.0.1. The framing rules themselves (several packets in a message, a
packet across messages, text frames, Close frames, refused upgrades) are pinned exactly by
tests/unit/mqtt/test_websocket_transport.py against scripted servers; here the real broker
checks that it all holds together: every QoS, a broker restart, 1 MB messages, wss:// with a
test CA and client certificates, and ALPN as AWS IoT Core uses it (`x-amzn-mqtt-ca`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import BrokerUnreachable, TlsError
from connector.mqtt.tls import TlsOptions
from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from devtools.interop_brokers import MochiBroker, MochiTls
from tests.support.brokers import Pki
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0
AWS_ALPN = "x-amzn-mqtt-ca"

MochiFactory = Callable[..., MochiBroker]


def publisher(broker: MochiBroker) -> PahoClient:
    """A connected paho-mqtt client on the broker's plain TCP listener."""
    paho = PahoClient(unique_id("paho-"))
    assert paho.connect(broker.host, broker.port).accepted, f"paho refused by {broker!r}"
    return paho


def receive(client: MqttClient, count: int, timeout: float = TIMEOUT) -> list[tuple[str, bytes]]:
    """Poll and acknowledge until ``count`` messages arrived; their topics and payloads."""
    got: list[tuple[str, bytes]] = []

    def arrived() -> bool:
        read = client.poll(0.1)
        got.extend((m.topic, m.payload) for m in read.messages)
        client.acknowledge(read.messages, read.released)
        return len(got) >= count

    wait_until(arrived, timeout, interval=0, message=lambda: f"{len(got)} of {count} arrived")
    return got


def test_every_qos_over_ws_and_after_a_broker_restart(mochi_factory: MochiFactory) -> None:
    broker = mochi_factory(listeners=("ws",))
    url = broker.ws_url + "/mqtt"
    config = SessionConfig(unique_id("ws-"), clean_session=False, keep_alive=10)
    client = MqttClient(url, config, [("ws/#", 2)], connect_timeout=5.0)
    client.reconnect_policy.initial = client.reconnect_policy.maximum = 0.05
    published: set[bytes] = set()
    received: list[bytes] = []

    def round_of(name: str) -> None:
        paho = publisher(broker)
        for qos in (0, 1, 2):
            for n in range(20):
                payload = f"{name}-q{qos}-{n:03d}".encode()
                paho.publish(f"ws/q{qos}", payload, qos)
                published.add(payload)
        paho.disconnect()
        received.extend(payload for _, payload in receive(client, 60))

    try:
        assert not client.connect().session_present
        round_of("before")
        broker.restart()  # mochi keeps sessions in memory: the new one knows none
        wait_until(
            lambda: client.poll(0.1).messages == [] and client.connections == 2,
            TIMEOUT,
            interval=0,
            message="the client did not reconnect over ws:// after the restart",
        )
        round_of("after")
    finally:
        client.disconnect()
    assert len(received) == len(published) == 120
    assert set(received) == published


def test_wss_with_a_test_ca_and_client_certificates(mochi_factory: MochiFactory, pki: Pki) -> None:
    tls = MochiTls(pki.server_cert, pki.server_key, client_ca=pki.ca_cert)
    broker = mochi_factory(listeners=("wss",), tls=tls)
    url = broker.listener_url("wss", "localhost") + "/mqtt?token=not-shown"
    trusted = TlsOptions(str(pki.ca_cert), str(pki.client_cert), str(pki.client_key))
    with MqttClient(url, SessionConfig(unique_id("wss-")), [("s/#", 1)], tls=trusted) as client:
        client.connect()
        assert "token" not in str(client.broker)
        paho = publisher(broker)
        paho.publish("s/1", b"\x00over wss\xff", 1)
        paho.disconnect()
        assert receive(client, 1) == [("s/1", b"\x00over wss\xff")]

    untrusted = TlsOptions(str(pki.other_ca_cert), str(pki.client_cert), str(pki.client_key))
    with pytest.raises(TlsError, match="is not trusted"):
        MqttClient(url, SessionConfig(unique_id("wss-")), tls=untrusted).connect()
    # TLS 1.3: the broker's refusal of a missing client certificate arrives on the first read,
    # the WebSocket handshake's.
    anonymous = TlsOptions(str(pki.ca_cert))
    with pytest.raises(TlsError, match="requires a client certificate") as refused:
        MqttClient(url, SessionConfig(unique_id("wss-")), tls=anonymous).connect()
    assert "not-shown" not in str(refused.value)


def test_one_megabyte_messages_both_ways_and_many_small_ones_in_order(
    mochi_factory: MochiFactory,
) -> None:
    broker = mochi_factory(listeners=("ws",))
    big = os.urandom(1 << 20)
    # Small reads: the 1 MB message spans many reads, each partial frame fed on as it comes.
    config = SessionConfig(unique_id("big-"))
    with MqttClient(broker.ws_url, config, [("big/#", 1)], read_size=16384) as client:
        client.connect()
        paho = publisher(broker)
        paho.publish("big/in", big, 1)
        for n in range(300):
            paho.publish("big/small", b"%05d" % n, 0)
        paho.disconnect()
        got = receive(client, 301)
        assert got[0] == ("big/in", big)
        assert [payload for _, payload in got[1:]] == [b"%05d" % n for n in range(300)]
        # Our own 1 MB PUBLISH goes out as one binary message and comes back.
        client.publish("big/out", big[::-1], 1)
        assert receive(client, 1) == [("big/out", big[::-1])]


def test_a_ws_url_at_the_plain_mqtt_port_names_the_listener(mochi_factory: MochiFactory) -> None:
    broker = mochi_factory()
    client = MqttClient(f"ws://{broker.host}:{broker.port}", SessionConfig(unique_id("ws-")))
    with pytest.raises(BrokerUnreachable) as failed:
        client.connect()
    assert f"ws://{broker.host}:{broker.port}/mqtt" in str(failed.value)
    assert "is it a WebSocket (HTTP) listener?" in str(failed.value)


def test_alpn_as_aws_iot_core_requires_it(
    mochi_factory: MochiFactory, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The TLS listener accepts only ALPN `x-amzn-mqtt-ca` and a client certificate, as AWS IoT
    Core's port 443 does for MQTT; the source's `tls.alpn` option reaches the handshake."""
    tls = MochiTls(pki.server_cert, pki.server_key, client_ca=pki.ca_cert, alpn=AWS_ALPN)
    broker = mochi_factory(listeners=("tls",), tls=tls)
    url = broker.listener_url("tls", "localhost")
    options = SourceOptions.parse(
        {
            "brokerUrl": url,
            "topic": "aws/#",
            "walPath": str(tmp_path / "wal"),
            "tls.caFile": str(pki.ca_cert),
            "tls.certFile": str(pki.client_cert),
            "tls.keyFile": str(pki.client_key),
            "tls.alpn": AWS_ALPN,
        }
    )
    receiver = Receiver(options)
    with caplog.at_level(logging.INFO, logger="connector.mqtt.driver"):
        receiver.start()
    try:
        assert receiver.client.connected
        assert f"ALPN protocol {AWS_ALPN} selected" in caplog.text
    finally:
        receiver.stop()

    def offering(*alpn: str) -> MqttClient:
        tls = TlsOptions(str(pki.ca_cert), str(pki.client_cert), str(pki.client_key), alpn=alpn)
        return MqttClient(url, SessionConfig(unique_id("alpn-")), tls=tls, connect_timeout=5.0)

    with pytest.raises(TlsError) as refused:
        offering("mqtt").connect()
    message = str(refused.value)
    assert "no application protocol" in message and "tls.alpn" in message
    assert AWS_ALPN in message  # the hint names AWS's protocol
    # A client offering no ALPN at all gets none and is served (Go's TLS, RFC 7301 section
    # 3.2): unlike AWS, which then speaks HTTPS on port 443 (docs/brokers.md).
    with offering() as client:
        client.connect()


def test_alpn_offered_to_a_server_without_alpn_goes_on(
    mochi_factory: MochiFactory, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    broker = mochi_factory(listeners=("tls",), tls=MochiTls(pki.server_cert, pki.server_key))
    tls = TlsOptions(str(pki.ca_cert), alpn=(AWS_ALPN,))
    url = broker.listener_url("tls", "localhost")
    with (
        caplog.at_level(logging.INFO, logger="connector.mqtt.driver"),
        MqttClient(url, SessionConfig(unique_id("alpn-")), tls=tls) as client,
    ):
        client.connect()
    assert f"ALPN protocol None selected (offered: {AWS_ALPN})" in caplog.text


def test_the_cli_subscribes_over_ws(mochi_factory: MochiFactory) -> None:
    broker = mochi_factory(listeners=("ws",))
    topic = unique_id("cli/")
    paho = publisher(broker)
    paho.publish(topic, b"retained \x00 for the cli", 1, retain=True)
    paho.disconnect()
    command = ["sub", "--broker", broker.ws_url + "/mqtt", "--topic", topic, "--count", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "connector.mqtt", *command, "--timeout", str(TIMEOUT)],
        cwd=REPO,
        capture_output=True,
        timeout=TIMEOUT + 10,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    [line] = result.stdout.decode().splitlines()
    message = json.loads(line)
    assert (message["topic"], message["retained"]) == (topic, True)
    assert base64.b64decode(message["payload"]) == b"retained \x00 for the cli"


def test_mqtt5_over_ws_keeps_properties(mochi_factory: MochiFactory) -> None:
    """MQTT 5 over the WebSocket listener: a message our MQTT 5 client published over TCP,
    with a content type and repeated user properties, reaches the subscriber intact."""
    from connector.mqtt.packets import ProtocolLevel
    from connector.mqtt.properties import Properties

    broker = mochi_factory(listeners=("ws",))
    v5 = ProtocolLevel.MQTT_5
    config = SessionConfig(unique_id("ws5-"), clean_session=True, level=v5)
    client = MqttClient(broker.ws_url + "/mqtt", config, [("ws5/#", 1)], connect_timeout=5.0)
    publisher = MqttClient(broker.url, SessionConfig(unique_id("pub5-"), True, level=v5))
    props = Properties(content_type="application/json", user_properties=[("k", "1"), ("k", "2")])
    with client, publisher:
        connected = client.connect()
        assert connected.limits is not None  # a level 5 CONNACK came over the WebSocket
        publisher.connect()
        # QoS 0: mochi-mqtt 2.7.9 answers an MQTT 5 QoS 1 PUBLISH with PUBACK reason code
        # 0x01, which section 3.4.2.1 does not allow (the publisher then closes).
        publisher.publish("ws5/a", b"{}", 0, properties=props)
        got: list[tuple[str, str | None, list[tuple[str, str]]]] = []

        def arrived() -> bool:
            read = client.poll(0.1)
            for m in read.messages:
                assert m.properties is not None
                got.append((m.topic, m.properties.content_type, m.properties.user_properties))
            client.acknowledge(read.messages, read.released)
            return bool(got)

        wait_until(arrived, TIMEOUT, interval=0, message="the MQTT 5 message did not arrive")
    assert got == [("ws5/a", "application/json", [("k", "1"), ("k", "2")])]
