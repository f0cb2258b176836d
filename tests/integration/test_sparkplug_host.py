"""The receiver as a Sparkplug host (``sparkplugHostId``) against a real Mosquitto, without Spark:
STATE birth after the connect (retained, with the CONNECT's timestamp), the Will published by
the broker when the connection is cut, a new birth after the reconnect, rebirth requests for
data it cannot resolve (rate-limited), and the death on a clean stop (Sparkplug 3.0 4.2.3, 5)."""

from __future__ import annotations

import json
from pathlib import Path

from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from connector.wal import WalReader
from devtools.fault_proxy import FaultProxy
from devtools.sparkplug_payloads import birth, data, pb
from tests.support.brokers import MosquittoBroker
from tests.support.paho_client import PahoClient, Received
from tests.support.waiting import wait_until

STATE = "spBv1.0/STATE/scada"
NCMD = "spBv1.0/plant/NCMD/edge1"


def _watcher(broker: MosquittoBroker, name: str) -> PahoClient:
    client = PahoClient(name)
    assert client.connect(broker.host, broker.port).accepted
    client.subscribe(STATE, 1)
    client.subscribe("spBv1.0/+/NCMD/#", 0)
    return client


def _states(client: PahoClient) -> list[dict[str, object]]:
    return [json.loads(m.payload) for m in client.messages if m.topic == STATE]


def _wait_states(client: PahoClient, count: int) -> list[dict[str, object]]:
    return wait_until(
        lambda: _states(client) if len(_states(client)) >= count else None,
        20,
        message=lambda: f"STATE messages: {_states(client)}",
    )


def _commands(client: PahoClient) -> list[Received]:
    return [m for m in client.messages if m.topic == NCMD]


def _host(
    url: str, tmp_path: Path, topic: str, qos: str, host_id: str, **extra: str
) -> SourceOptions:
    """A Sparkplug receiver's options with the host role."""
    return SourceOptions.parse(
        {
            "brokerUrl": url,
            "topic": topic,
            "qos": qos,
            "clientId": f"host-{host_id}",
            "walPath": str(tmp_path / "wal"),
            "payloadFormat": "sparkplug",
            "sparkplugHostId": host_id,
            **extra,
        }
    )


def test_state_birth_will_rebirth_requests_and_clean_death(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    watcher = _watcher(mosquitto, "watcher")
    with FaultProxy((mosquitto.host, mosquitto.port)) as proxy:
        receiver = Receiver(
            _host(proxy.url, tmp_path, "spBv1.0/#", "1", "scada", sparkplugRebirthInterval="3600")
        )
        receiver.start()
        try:
            (first,) = _wait_states(watcher, 1)
            assert first["online"] is True and isinstance(first["timestamp"], int)
            # The host's own STATE is stored too: `spBv1.0/#` takes it, no second filter.
            assert receiver.client.subscriptions == [("spBv1.0/#", 1)]
            wait_until(lambda: receiver.wal.next_offset >= 1, 20, message="STATE not stored")

            # Data of a node whose birth the host never saw: one request per interval.
            publisher = PahoClient("edge1")
            assert publisher.connect(mosquitto.host, mosquitto.port).accepted
            publisher.publish("spBv1.0/plant/NDATA/edge1", data([(1, "int_value", 1)], 5), 0)
            wait_until(lambda: _commands(watcher), 20, message="no rebirth request")
            publisher.publish("spBv1.0/plant/NDATA/edge1", data([(1, "int_value", 1)], 6), 0)
            wait_until(lambda: receiver.wal.next_offset >= 3, 20, message="DATA not stored")
            (command,) = _commands(watcher)
            request = pb().Payload()
            request.ParseFromString(command.payload)
            assert [(m.name, m.boolean_value) for m in request.metrics] == [
                ("Node Control/Rebirth", True)
            ]
            assert command.qos == 0 and not command.retain

            # The connection is cut: the broker publishes the Will (the CONNECT's time), the
            # receiver reconnects and is born again with the new CONNECT's time.
            assert proxy.cut() == 1
            states = _wait_states(watcher, 3)
            assert states[1] == {"online": False, "timestamp": first["timestamp"]}
            assert states[2]["online"] is True
            assert int(str(states[2]["timestamp"])) >= int(str(first["timestamp"]))

            # A birth after the request resolves the node's data: no further request.
            before = receiver.wal.next_offset  # before publishing: they may be stored at once
            publisher.publish("spBv1.0/plant/NBIRTH/edge1", birth([("t", 1, 3, "int_value", 0)], 0))
            publisher.publish("spBv1.0/plant/NDATA/edge1", data([(1, "int_value", 2)], 1), 0)
            wait_until(lambda: receiver.wal.next_offset >= before + 2, 20, message="not stored")
            assert len(_commands(watcher)) == 1
            publisher.disconnect()
        finally:
            receiver.stop()
        # The DISCONNECT must reach the broker before the proxy closes, or the broker
        # publishes the Will (the connection would end without one).
        wait_until(
            lambda: "Client host-scada disconnected." in mosquitto.log_text(),
            20,
            message=lambda: f"the broker saw no DISCONNECT:\n{mosquitto.log_text()[-2500:]}",
        )
        last = _wait_states(watcher, 4)[3]
        assert last["online"] is False
        assert int(str(last["timestamp"])) >= int(str(states[2]["timestamp"]))
    watcher.disconnect()

    # The retained STATE is the death of the clean stop (no Will after a DISCONNECT).
    late = PahoClient("late")
    assert late.connect(mosquitto.host, mosquitto.port).accepted
    late.subscribe(STATE, 1)
    (retained,) = late.wait_for_messages(1)
    assert retained.retain and json.loads(retained.payload) == last
    late.disconnect()


def test_a_filter_without_the_state_topic_gets_a_subscription_of_its_own(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    receiver = Receiver(_host(mosquitto.url, tmp_path, "spBv1.0/plant/#", "0", "scada2"))
    receiver.start()
    try:
        assert receiver.client.subscriptions == [
            ("spBv1.0/plant/#", 0),
            ("spBv1.0/STATE/scada2", 1),
        ]
        wait_until(lambda: receiver.wal.next_offset >= 1, 20, message="own STATE not stored")
    finally:
        receiver.stop()
    columns = WalReader(tmp_path / "wal").read(0, 1)
    assert columns.topics == ["spBv1.0/STATE/scada2"]
    assert json.loads(columns.payloads[0])["online"] is True
