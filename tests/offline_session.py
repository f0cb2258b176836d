"""Messages queued for a query that has not started: its persistent session is made first
(clean session off, with its subscriptions), then the messages are published, and the broker
queues every QoS 1 and QoS 2 one for the session. A ``Trigger.AvailableNow`` run with that
client id then drains a known set of messages and ends by itself."""

from __future__ import annotations

from collections.abc import Sequence

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from tests.brokers import MosquittoBroker
from tests.spark.streams import Message, publish


def queue_for_session(
    broker: MosquittoBroker,
    client_id: str,
    subscriptions: Sequence[tuple[str, int]],
    messages: Sequence[Message],
) -> None:
    """Make ``client_id``'s persistent session with ``subscriptions`` (topic filter, QoS),
    then publish ``messages``; returns once the broker took every one."""
    client = MqttClient(
        broker.url, SessionConfig(client_id, clean_session=False), list(subscriptions)
    )
    assert not client.connect().session_present, f"{client_id} already had a session"
    client.disconnect()
    publish(broker, messages)
