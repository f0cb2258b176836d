"""The session's CONNACK and packet-size rules against brokers on loopback: scripted ones that
break the rules on purpose, and a real Mosquitto that keeps them.

* A CONNACK with Session Present 1 answering a clean start is closed with DISCONNECT 0x82
  (MQTT 5.0 [MQTT-3.2.2-4]), on every attempt, until the client gives up.
* A PUBLISH above our Maximum Packet Size is refused with DISCONNECT 0x95 and never
  acknowledged (MQTT 5.0 section 3.1.2.11.4); the broker's next message arrives. A broker that
  keeps sending it fails the source with an error naming ``maxPacketSize``. Mosquitto keeps to
  the Maximum Packet Size we send: it drops the larger message for us ([MQTT-3.1.2-25]).
* At 3.1.1 a persistent session answered with Session Present 0 discards its state: the
  forgotten QoS 2 id is released in the WAL, the possible gap is reported, and the id then names
  a new message ([MQTT-3.2.2-5] in MQTT 5.0's numbering; 3.1.1 section 3.2.2.2).
"""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import paho.mqtt.client as paho_mqtt
import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.encode import encode
from connector.mqtt.errors import BrokerViolation, RepeatedProtocolViolation
from connector.mqtt.packets import (
    Connack,
    Disconnect,
    Packet,
    ProtocolLevel,
    Puback,
    Publish,
    Pubrec,
)
from connector.receiver.receiver import Receiver
from connector.wal import WalReader
from tests.integration.receiver_setup import options
from tests.support.brokers import MosquittoBroker
from tests.support.hostile_broker import ScriptedBroker
from tests.support.paho_client import PahoClient
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

V4 = ProtocolLevel.MQTT_3_1_1
V5 = ProtocolLevel.MQTT_5
TIMEOUT = 15.0
LIMIT = 1024
"""The Maximum Packet Size the clients here send."""


def clean_v5(client_id: str = "rules-5") -> SessionConfig:
    """A clean MQTT 5 session that sends a Maximum Packet Size of ``LIMIT``."""
    return SessionConfig(client_id, clean_session=True, level=V5, maximum_packet_size=LIMIT)


def packets_of(broker: ScriptedBroker, number: int) -> list[Packet]:
    return list(broker.received.get(number, []))


def fast_retries(client: MqttClient) -> MqttClient:
    client.reconnect_policy.initial = client.reconnect_policy.maximum = 0.02
    return client


def poll_until_error(client: MqttClient) -> BaseException:
    """Poll (reconnecting as it does) until ``poll`` raises; returns what it raised."""
    raised: list[BaseException] = []

    def failed() -> bool:
        try:
            read = client.poll(0.05)
        except Exception as exc:
            raised.append(exc)
            return True
        client.acknowledge(read.messages, read.released)
        return False

    wait_until(failed, TIMEOUT, interval=0, message="the client never gave up")
    return raised[0]


# ---------------------------------------------------------------------------- Session Present


def test_session_present_on_a_clean_start_is_closed_with_0x82_until_the_client_gives_up() -> None:
    def claim_a_session(conn: socket.socket, number: int) -> None:
        conn.sendall(encode(Connack(True, 0), V5))

    with ScriptedBroker(lambda conn, n: None, on_connect=claim_a_session, level=V5) as broker:
        client = fast_retries(MqttClient(broker.url, clean_v5(), [("a/#", 1)], connect_timeout=5))
        with pytest.raises(BrokerViolation, match=r"Session Present 1.*MQTT-3\.2\.2-4"):
            client.connect()
        error = poll_until_error(client)
        client.close()
        assert isinstance(error, RepeatedProtocolViolation) and error.code == 0x82
        assert error.count == 5 and broker.connections == 5
        for number in range(1, 6):  # the broker reads until it stops

            def disconnected(n: int = number) -> bool:
                return Disconnect(0x82) in packets_of(broker, n)

            wait_until(disconnected, TIMEOUT)
            # Never subscribed: the connection was refused at CONNACK.
            sent = [type(p).__name__ for p in packets_of(broker, number)]
            assert sent == ["Connect", "Disconnect"]


# ---------------------------------------------------------------------------- Maximum Packet Size


def oversized_then_small(always: bool) -> object:
    """After SUBACK: a QoS 1 PUBLISH over ``LIMIT`` (on the first connection, or on every one
    when ``always``), then on later connections a small one."""

    def script(conn: socket.socket, number: int) -> None:
        if number == 1 or always:
            big = Publish("a/big", b"B" * LIMIT, qos=1, packet_id=1)
            conn.sendall(encode(big, V5))
        else:
            conn.sendall(encode(Publish("a/small", b"fits", qos=1, packet_id=2), V5))

    return script


def connack_v5(conn: socket.socket, number: int) -> None:
    conn.sendall(encode(Connack(False, 0), V5))


def test_a_publish_above_our_maximum_is_refused_with_0x95_and_never_acknowledged() -> None:
    script = oversized_then_small(always=False)
    with ScriptedBroker(script, on_connect=connack_v5, level=V5) as broker:  # type: ignore[arg-type]
        client = fast_retries(MqttClient(broker.url, clean_v5(), [("a/#", 1)], connect_timeout=5))
        client.connect()
        got: list[Publish] = []

        def small_arrived() -> bool:
            read = client.poll(0.05)
            got.extend(read.messages)
            client.acknowledge(read.messages, read.released)
            return bool(got)

        wait_until(small_arrived, TIMEOUT, interval=0, message="the next message never came")
        wait_until(lambda: Puback(2) in packets_of(broker, 2), TIMEOUT)
        client.disconnect()
        wait_until(lambda: Disconnect(0x95) in packets_of(broker, 1), TIMEOUT)
        first = packets_of(broker, 1)
    assert [(m.topic, m.payload) for m in got] == [("a/small", b"fits")]
    assert not any(isinstance(p, Puback) for p in first)


def test_a_broker_that_keeps_sending_too_large_fails_the_source_naming_the_option(
    tmp_path: Path,
) -> None:
    script = oversized_then_small(always=True)
    with ScriptedBroker(script, on_connect=connack_v5, level=V5) as broker:  # type: ignore[arg-type]
        receiver = Receiver(
            options(
                broker,  # type: ignore[arg-type]
                tmp_path / "wal",
                1,
                mqttVersion="5",
                maxPacketSize=str(LIMIT),
                cleanSession="true",
            )
        )
        fast_retries(receiver.client)
        receiver.start()
        try:
            wait_until(lambda: receiver.error is not None, 60, message="the receiver kept going")
            with pytest.raises(RuntimeError) as failure:
                receiver.check()
        finally:
            receiver.stop()
    text = str(failure.value)
    assert "0x95 Packet too large" in text and f"Maximum Packet Size of {LIMIT} bytes" in text
    assert "raise the source option 'maxPacketSize'" in text
    assert receiver.wal.next_offset == 0  # nothing stored, nothing acknowledged
    for number in range(1, broker.connections + 1):
        assert not any(isinstance(p, Puback) for p in packets_of(broker, number))


def test_mosquitto_drops_for_us_what_exceeds_the_maximum_packet_size_we_send(
    mosquitto: MosquittoBroker,
) -> None:
    """The other side of the rule: a broker that keeps it never sends the larger message to
    this client ([MQTT-3.1.2-25]); the ones before and after it arrive."""
    client = MqttClient(mosquitto.url, clean_v5("mps-5"), [("mps/#", 1)])
    client.connect()
    with PahoClient("mps-pub", protocol=paho_mqtt.MQTTv5) as pub:
        assert pub.connect(mosquitto.host, mosquitto.port).accepted
        for payload in (b"before", b"L" * 2 * LIMIT, b"after"):
            info = pub.client.publish("mps/t", payload, qos=1)
            info.wait_for_publish(TIMEOUT)
            assert info.is_published()
    got: list[bytes] = []

    def after_arrived() -> bool:
        read = client.poll(0.05)
        got.extend(m.payload for m in read.messages)
        client.acknowledge(read.messages, read.released)
        return b"after" in got

    wait_until(after_arrived, TIMEOUT, interval=0, message=lambda: f"got {got}")
    client.disconnect()
    assert got == [b"before", b"after"]
    assert "Dropping too large outgoing PUBLISH for mps-5" in mosquitto.log_text()


# ---------------------------------------------------------------------------- Session Present 0


def test_a_lost_persistent_session_releases_its_qos2_ids_and_reports_the_gap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Connection 1 (a new session) delivers QoS 2 id 7, which is stored and answered with
    PUBREC; the broker then drops without PUBREL. Connection 2 says Session Present 0: the
    session discards its state, the WAL records the release of id 7, the possible gap is
    logged, and a new message with id 7 is stored, not withheld as a resend."""
    pubrec_seen = threading.Event()

    def connack(conn: socket.socket, number: int) -> None:
        conn.sendall(encode(Connack(False, 0), V4))
        if number == 2:
            conn.sendall(encode(Publish("r/x", b"second 7", qos=2, packet_id=7), V4))

    def script(conn: socket.socket, number: int) -> None:
        if number != 1:
            return

        def run() -> None:
            conn.sendall(encode(Publish("r/x", b"first 7", qos=2, packet_id=7), V4))
            wait_until(lambda: Pubrec(7) in packets_of(broker, 1), TIMEOUT)
            pubrec_seen.set()
            conn.shutdown(socket.SHUT_RDWR)  # gone before its PUBREL

        threading.Thread(target=run, daemon=True).start()

    caplog.set_level(logging.WARNING, logger="connector.receiver.receiver")
    with ScriptedBroker(script, on_connect=connack) as broker:
        receiver = Receiver(options(broker, tmp_path / "wal", 2))  # type: ignore[arg-type]
        fast_retries(receiver.client)
        receiver.start()
        try:
            wait_until(lambda: receiver.wal.next_offset >= 2, TIMEOUT, message="not stored")
            wait_until(lambda: Pubrec(7) in packets_of(broker, 2), TIMEOUT)
            assert pubrec_seen.is_set()
            assert receiver.stats.sessions_lost == 1
            assert receiver.wal.qos2_pending == frozenset({7})  # the new message's exchange
        finally:
            receiver.stop()
    records = list(WalReader(tmp_path / "wal").read(0, 2).records())
    assert [(r.payload, r.packet_id) for r in records] == [(b"first 7", 7), (b"second 7", 7)]
    assert "possible gap before WAL offset 1" in caplog.text
