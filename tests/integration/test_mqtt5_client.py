"""MQTT 5 end to end with real brokers: the client (MqttClient) and the CLI against Mosquitto
2.0.11 and mochi-mqtt, which both speak level 5, publishing with paho-mqtt's MQTT 5 client.

Covers the properties a subscriber sees (CLI ``properties`` object), the CLI's publishing
flags, an Assigned Client Identifier reused across reconnects, a refused CONNECT naming its
reason code, a broker's DISCONNECT on session takeover, our Receive Maximum honoured by a
broker, and topic aliases set by the broker.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import paho.mqtt.client as paho_mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from connector.mqtt.address import BrokerAddress
from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import NotAuthorized, ServerDisconnected
from connector.mqtt.faults import BrokerFault
from connector.mqtt.packets import ProtocolLevel
from connector.mqtt.session import ClientSession
from devtools.interop_brokers import ExternalBroker
from tests.integration.test_client_cli import cli
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient
from tests.support.publishing import Message, publish
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

V5 = ProtocolLevel.MQTT_5
TIMEOUT = 15.0


def v5_client(url: str, client_id: str, topic: str | None = None, **settings: Any) -> MqttClient:
    settings.setdefault("clean_session", False)
    session = ClientSession(SessionConfig(client_id, level=V5, **settings))
    return MqttClient(BrokerAddress.parse(url), session, [(topic, 1)] if topic else [])


def every_property() -> PahoProperties:
    props = PahoProperties(PacketTypes.PUBLISH)
    props.PayloadFormatIndicator = 1
    props.MessageExpiryInterval = 3600
    props.ContentType = "application/json"
    props.ResponseTopic = "replies/here"
    props.CorrelationData = b"\x00\x01corr"
    props.UserProperty = [("site", "north"), ("site", "south"), ("unit", "°C")]
    return props


def test_sub_prints_each_messages_properties(mosquitto: MosquittoBroker) -> None:
    topic = unique_id("v5/")
    client_id = unique_id("cli5-")
    created = cli(
        "sub", "--broker", mosquitto.url, "--topic", topic, "--qos", "1", "--count", "0",
        "--client-id", client_id, "--no-clean-session", "--mqtt-version", "5",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr.decode()
    messages = [Message(topic, b'{"t": 1}', properties=every_property()), Message(topic, b"bare")]
    publish(mosquitto, messages, protocol=paho_mqtt.MQTTv5)
    result = cli(
        "sub", "--broker", mosquitto.url, "--topic", topic, "--qos", "1", "--count", "2",
        "--timeout", "20", "--client-id", client_id, "--no-clean-session",
        "--mqtt-version", "5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    first, second = (json.loads(line) for line in result.stdout.decode().splitlines())
    assert base64.b64decode(first["payload"]) == b'{"t": 1}' and first["topic"] == topic
    assert first["properties"] == {
        "payloadFormatIndicator": 1,
        "messageExpiryInterval": first["properties"]["messageExpiryInterval"],
        "contentType": "application/json",
        "responseTopic": "replies/here",
        "correlationData": base64.b64encode(b"\x00\x01corr").decode(),
        "userProperties": [["site", "north"], ["site", "south"], ["unit", "°C"]],
        "subscriptionIdentifiers": [],
    }
    # The broker forwards the expiry interval less the time the message waited (3.3.2.3.3).
    assert 3590 <= first["properties"]["messageExpiryInterval"] <= 3600
    assert second["properties"] == {
        "payloadFormatIndicator": None,
        "messageExpiryInterval": None,
        "contentType": None,
        "responseTopic": None,
        "correlationData": None,
        "userProperties": [],
        "subscriptionIdentifiers": [],
    }


def test_3_1_1_lines_have_no_properties(mosquitto: MosquittoBroker) -> None:
    topic = unique_id("v4/")
    client_id = unique_id("cli4-")
    args = ["--broker", mosquitto.url, "--topic", topic, "--qos", "1", "--client-id", client_id]
    assert cli("sub", *args, "--count", "0", "--no-clean-session").returncode == 0
    publish(
        mosquitto, [Message(topic, b"x", properties=every_property())], protocol=paho_mqtt.MQTTv5
    )
    result = cli("sub", *args, "--count", "1", "--timeout", "20", "--no-clean-session")
    assert result.returncode == 0, result.stderr.decode()
    assert "properties" not in json.loads(result.stdout)


def test_pub_sends_the_properties_it_was_given(mosquitto: MosquittoBroker) -> None:
    topic = unique_id("v5pub/")
    with PahoClient(unique_id("obs-"), protocol=paho_mqtt.MQTTv5) as observer:
        assert observer.connect(mosquitto.host, mosquitto.port).accepted
        observer.subscribe(topic, qos=1)
        result = cli(
            "pub", "--broker", mosquitto.url, "--topic", topic, "--qos", "2", "--count", "3",
            "--mqtt-version", "5", "--user-property", "k=1", "--user-property", "k=2",
            "--content-type", "text/plain", "--message-expiry", "600",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        received = observer.wait_for_messages(3)
        observer.disconnect()
    for message in received:
        props = message.properties
        assert props is not None
        assert props.UserProperty == [("k", "1"), ("k", "2")]
        assert props.ContentType == "text/plain"
        assert 590 <= props.MessageExpiryInterval <= 600


def test_publishing_flags_need_mqtt_5(mosquitto: MosquittoBroker) -> None:
    result = cli("pub", "--broker", mosquitto.url, "--topic", "t", "--content-type", "x/y")
    assert result.returncode == 1 and b"need --mqtt-version 5" in result.stderr


def test_an_assigned_client_id_keeps_the_session_across_reconnects(
    mosquitto: MosquittoBroker,
) -> None:
    topic = unique_id("assigned/")
    client = v5_client(mosquitto.url, "", topic)
    with client:
        first = client.connect()
        assigned = client.session.client_id
        assert assigned and first.limits is not None
        assert first.limits.assigned_client_identifier == assigned
        client.close()  # the connection drops; the session stays with the broker
        publish(mosquitto, [Message(topic, b"while away")], protocol=paho_mqtt.MQTTv5)
        again = client.connect()
        assert again.session_present and client.session.client_id == assigned
        messages: list[bytes] = []

        def arrived() -> bool:
            read = client.poll(0.5)
            messages.extend(m.payload for m in read.messages)
            client.acknowledge(read.messages, read.released)
            return bool(messages)

        wait_until(arrived, TIMEOUT, message="the queued message did not arrive")
        assert messages == [b"while away"]


def test_the_cli_lets_the_broker_assign_a_client_id(mosquitto: MosquittoBroker) -> None:
    result = cli(
        "sub", "--broker", mosquitto.url, "--topic", unique_id("t/"), "--count", "0",
        "--client-id", "", "--mqtt-version", "5", "-v",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert b"the broker assigned client id" in result.stderr


def test_a_refused_connect_names_the_reason_code(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(users={"alice": "right-secret"})
    client = v5_client(broker.url, unique_id("bad-"), username="alice", password=b"wrong-secret")
    # Mosquitto 2.0.11 answers a wrong password at level 5 with 0x87, not 0x86.
    with pytest.raises(NotAuthorized, match="CONNACK 0x87 Not authorized") as caught:
        client.connect()
    assert "wrong-secret" not in str(caught.value)
    result = cli(
        "sub", "--broker", broker.url, "--topic", "t", "--mqtt-version", "5",
        "--username", "alice", "--password", "wrong-secret", "--allow-password-over-plain-tcp",
    )  # fmt: skip
    assert result.returncode == 1
    assert b"0x87 Not authorized" in result.stderr
    assert b"wrong-secret" not in result.stderr


def test_a_session_taken_over_stops_the_first_client(mochi: ExternalBroker) -> None:
    """mochi-mqtt tells the first client why with DISCONNECT 0x8E (Mosquitto 2.0.11 only
    closes its connection, which is taken as a lost connection and reconnected)."""
    client_id = unique_id("twin-")
    first = v5_client(mochi.url, client_id, unique_id("t/"))
    second = v5_client(mochi.url, client_id)
    with first, second:
        first.connect()
        second.connect()
        deadline = time.monotonic() + TIMEOUT
        with pytest.raises(ServerDisconnected, match="0x8E Session taken over") as caught:
            while time.monotonic() < deadline:
                first.poll(0.5)
        assert caught.value.reason_code == 0x8E


def test_the_broker_keeps_to_our_receive_maximum(mosquitto: MosquittoBroker) -> None:
    """Messages published while we are connected: the broker sends our Receive Maximum of
    them and holds the sixth until we acknowledge (MQTT 5 section 4.9). Once acknowledgements
    flow, Mosquitto 2.0.11 lets its queue out past the window (its known overrun); the
    session counts that as a broker fault and takes the messages."""
    topic = unique_id("window/")
    client = v5_client(mosquitto.url, unique_id("win-"), topic, receive_maximum=5)
    payloads: list[bytes] = []
    with client:
        client.connect()
        held: list[Any] = []

        def window_full() -> bool:
            read = client.poll(0.5)
            held.extend(read.messages)
            return len(held) >= 5

        publisher = threading.Thread(
            target=publish,
            args=(mosquitto, [Message(topic, b"%d" % i) for i in range(40)]),
            kwargs={"protocol": paho_mqtt.MQTTv5},
        )
        publisher.start()
        wait_until(window_full, TIMEOUT, message="the first five messages did not arrive")
        assert len(held) == 5  # the sixth waits for an acknowledgement
        payloads.extend(m.payload for m in held)
        client.acknowledge(held)

        def drained() -> bool:
            read = client.poll(0.5)
            payloads.extend(m.payload for m in read.messages)
            client.acknowledge(read.messages, read.released)
            return len(payloads) >= 40

        wait_until(drained, TIMEOUT, message="the rest did not arrive")
        publisher.join(TIMEOUT)
    assert sorted(payloads) == sorted(b"%d" % i for i in range(40))
    assert set(client.session.faults) <= {BrokerFault.RECEIVE_MAXIMUM_EXCEEDED}


def test_topic_aliases_set_by_the_broker_are_resolved(mochi: ExternalBroker) -> None:
    topic = unique_id("alias/")
    client = v5_client(
        mochi.url, unique_id("al-"), topic, clean_session=True, topic_alias_maximum=16
    )
    with client:
        client.connect()
        publish(mochi, [Message(topic, b"%d" % i) for i in range(5)], protocol=paho_mqtt.MQTTv5)
        seen: list[tuple[str, bytes]] = []

        def arrived() -> bool:
            read = client.poll(0.5)
            seen.extend((m.topic, m.payload) for m in read.messages)
            client.acknowledge(read.messages, read.released)
            return len(seen) >= 5

        wait_until(arrived, TIMEOUT, message="the messages did not arrive")
        assert client.session.topic_aliases == 1  # mochi sent the topic once, then its alias
    assert seen == [(topic, b"%d" % i) for i in range(5)]
