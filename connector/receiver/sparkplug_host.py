"""The receiver as a Sparkplug host (``sparkplugHostId``, docs/sparkplug.md): the I/O around
:class:`connector.sparkplug.host.SparkplugHost`. STATE birth after each connect, the death as
each CONNECT's Will (both with the time of that CONNECT) and on a clean stop, and rebirth
requests for what the receiver stored, sent after it was made durable and acknowledged: the
host role never holds up the acknowledgement path, and a failed publish (a dropped connection)
is logged and left to the next message, never an error of the query.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import ConnectionLost, LocalProtocolError
from connector.mqtt.packets import Publish, Will
from connector.mqtt.topics import topic_matches
from connector.options.source import SourceOptions
from connector.sparkplug.host import SparkplugHost, state_payload, state_topic

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0
"""How often pending sequence gaps are checked when no message comes."""
GOODBYE_SECONDS = 2.0
"""How long a clean stop waits for the PUBACK of the STATE death."""


class HostRole:
    """The host role of one receiver."""

    def __init__(self, options: SourceOptions) -> None:
        assert options.sparkplug_host_id is not None
        self.host_id = options.sparkplug_host_id
        self.topic = state_topic(self.host_id)
        self.host = SparkplugHost(
            self.host_id,
            round(options.sparkplug_reorder_timeout * 1_000_000),
            round(options.sparkplug_rebirth_interval * 1_000_000),
        )
        self.connect_ms = 0
        """The timestamp of the last CONNECT's Will, which the birth repeats."""
        self._next_tick = 0.0

    def subscriptions(self, topics: Sequence[str], qos: int) -> list[tuple[str, int]]:
        """The host's own STATE topic ([tck-id-host-topic-phid-birth-sub-required]), unless a
        filter of the query takes it already (two matching filters can bring a message
        twice)."""
        if any(topic_matches(f, self.topic) for f in topics):
            return []
        return [(self.topic, max(qos, 1))]

    def will(self) -> Will:
        """The STATE death of the CONNECT about to be sent, with its time."""
        self.connect_ms = time.time_ns() // 1_000_000
        return Will(self.topic, state_payload(False, self.connect_ms), qos=1, retain=True)

    def born(self, client: MqttClient) -> None:
        """After the subscriptions: the STATE birth, QoS 1, retained, with the CONNECT's
        timestamp ([tck-id-host-topic-phid-birth-payload-timestamp])."""
        self._publish(client, self.topic, state_payload(True, self.connect_ms), 1, True)
        log.info("Sparkplug host %r is online (STATE on %s)", self.host_id, self.topic)

    def goodbye(self, client: MqttClient) -> None:
        """Before a clean DISCONNECT: the STATE death with the time of the stop, and its PUBACK
        awaited (up to :data:`GOODBYE_SECONDS`): a broker that writes a PUBACK to a closed
        socket may count the connection as lost and publish the Will after it (docs/brokers.md).
        Messages read meanwhile are not acknowledged: the broker sends them again."""
        if not client.connected:
            return
        now_ms = time.time_ns() // 1_000_000
        pid = self._publish(client, self.topic, state_payload(False, now_ms), 1, True)
        deadline = time.monotonic() + GOODBYE_SECONDS
        while pid is not None and pid not in client.publish_done and client.connected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("Sparkplug host %r: no PUBACK for its STATE death", self.host_id)
                return
            client.poll(min(remaining, 0.2))

    def stored(self, client: MqttClient, messages: Sequence[Publish], now_us: int) -> None:
        """Messages now durable and acknowledged: send the rebirth requests they call for."""
        for message in messages:
            for topic, payload in self.host.observe(message.topic, message.payload, now_us):
                self._request(client, topic, payload)

    def tick(self, client: MqttClient) -> None:
        """At most once a second: requests for gaps past the Reorder Timeout."""
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_SECONDS
        for topic, payload in self.host.tick(time.time_ns() // 1000):
            self._request(client, topic, payload)

    def _request(self, client: MqttClient, topic: str, payload: bytes) -> None:
        log.info("asking the edge node of %s for a rebirth", topic)
        self._publish(client, topic, payload, 0, False)

    def _publish(
        self, client: MqttClient, topic: str, payload: bytes, qos: int, retain: bool
    ) -> int | None:
        """Publish; the packet id (None for QoS 0, or when it could not be sent)."""
        try:
            return client.publish(topic, payload, qos=qos, retain=retain)
        except (ConnectionLost, LocalProtocolError) as exc:
            log.warning("Sparkplug host %r could not publish on %s: %s", self.host_id, topic, exc)
            return None
