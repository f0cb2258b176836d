"""A broker's DISCONNECT at MQTT 5 (section 3.14) against a scripted broker on loopback: a
reason code after which reconnecting helps (0x8B Server shutting down) is logged by name and
followed by a reconnect; one in FATAL_DISCONNECTS stops the client with that name."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.encode import encode
from connector.mqtt.errors import ServerDisconnected
from connector.mqtt.packets import Connack, Disconnect, ProtocolLevel
from connector.mqtt.properties import Properties
from tests.support.hostile_broker import ScriptedBroker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

V5 = ProtocolLevel.MQTT_5


def connack_then(code: int) -> object:
    """CONNACK on every connection; on the first, DISCONNECT with ``code`` right after."""

    def on_connect(conn: socket.socket, number: int) -> None:
        conn.sendall(encode(Connack(False, 0), V5))
        if number == 1:
            why = Properties(reason_string="maintenance")
            conn.sendall(encode(Disconnect(code, why), V5))

    return on_connect


def client_for(broker: ScriptedBroker) -> MqttClient:
    client = MqttClient(broker.url, SessionConfig("disc-5", clean_session=True, level=V5))
    client.reconnect_policy.initial = client.reconnect_policy.maximum = 0.05
    return client


def test_a_passing_disconnect_is_logged_by_name_and_reconnected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="connector.mqtt")
    with ScriptedBroker(lambda conn, n: None, on_connect=connack_then(0x8B)) as broker:  # type: ignore[arg-type]
        client = client_for(broker)
        with client:

            def reconnected() -> bool:
                client.poll(0.2)  # connects, meets the DISCONNECT, reconnects with backoff
                return broker.connections >= 2 and client.connected

            wait_until(reconnected, 15.0, message="no reconnect after DISCONNECT 0x8B")
    assert "0x8B Server shutting down: maintenance" in caplog.text
    assert "before CONNACK" not in caplog.text  # the CONNACK came; the broker said why


def test_a_fatal_disconnect_stops_the_client_naming_it() -> None:
    with ScriptedBroker(lambda conn, n: None, on_connect=connack_then(0x87)) as broker:  # type: ignore[arg-type]
        client = client_for(broker)
        deadline = time.monotonic() + 15.0
        with client, pytest.raises(ServerDisconnected, match="0x87 Not authorized") as caught:
            while time.monotonic() < deadline:  # CONNACK and DISCONNECT may come apart
                client.poll(0.2)
        assert caught.value.reason_code == 0x87 and broker.connections == 1
