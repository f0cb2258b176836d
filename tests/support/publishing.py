"""Publishing to a test broker with paho-mqtt, and knowing what the broker took: a message is
taken once the broker acknowledged it (PUBACK / PUBCOMP), so a test can check a table or a WAL
against every message published.

* :class:`Message` (and :func:`numbered`, :func:`as_messages`): what to publish;
* :class:`Publisher`: a connected client that sends without waiting and knows which messages
  the broker acknowledged;
* :func:`publish`: messages in order, returning once the broker took every one;
* :func:`queue_for_session`: a query's persistent session made before the query starts, then
  messages the broker queues for it;
* :class:`SteadyPublisher` and :class:`PacedPublisher`: traffic at about a fixed rate from a
  thread, numbered until stopped, or given (and held mid-way when asked);
* :func:`publish_with_cli`: our own client's ``pub`` command, as a process of its own.

paho keeps at most 20 QoS 1/2 messages in flight, Mosquitto's window for 3.1.1 publishers
(beyond it Mosquitto silently drops QoS 2 messages), and queues the rest.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import paho.mqtt.client as mqtt
from paho.mqtt.client import MQTTMessageInfo

from devtools import REPO_ROOT
from devtools.backlog import create_session, pub_command
from devtools.broker_process import BrokerProcess
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient
from tests.support.waiting import wait_until

PUBLISH_TIMEOUT = 30.0
"""How long each message may wait for the broker's acknowledgement once all were sent."""
ACK_TIMEOUT = 60.0
"""How long a thread's traffic may wait for the broker's acknowledgements."""
HOLD_TIMEOUT = 300.0
"""How long a held publisher waits for its release (``PacedPublisher.hold_at``)."""
CLI_TIMEOUT = 60.0
_QUEUED = (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN)
"""paho's return codes for a message sent or queued (while disconnected, to go out on the
reconnection); anything else means it was dropped."""


@dataclass(frozen=True)
class Message:
    """One message to publish; ``properties`` (paho's, for a PUBLISH) need an MQTT 5 client."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = False
    properties: Any = None


def numbered(
    topic: str, count: int, *, qos: int = 1, start: int = 0, tag: str = "m"
) -> list[Message]:
    """``count`` messages on ``topic`` with distinct payloads ``<tag>-<n>``."""
    return [Message(topic, f"{tag}-{n}".encode(), qos) for n in range(start, start + count)]


def as_messages(pairs: Iterable[tuple[str, bytes]], qos: int = 1) -> list[Message]:
    """A :class:`Message` at ``qos`` for each (topic, payload) pair."""
    return [Message(topic, payload, qos) for topic, payload in pairs]


class Publisher:
    """A connected paho-mqtt client (clean session) that publishes without waiting and keeps
    each message's delivery, in sending order, so a test can wait for the broker's
    acknowledgements. Threads may send while another waits."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = None,
        protocol: mqtt.MQTTProtocolVersion = mqtt.MQTTv311,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.client = PahoClient(
            client_id or unique_id("pub-"), protocol=protocol, username=username, password=password
        )
        outcome = self.client.connect(host, port)
        assert outcome.accepted, f"publisher refused by {host}:{port}: {outcome}"
        self._lock = threading.Lock()
        self._sent: list[tuple[Message, MQTTMessageInfo]] = []

    def send(self, message: Message) -> MQTTMessageInfo:
        """Hand ``message`` to paho (sent now, or queued to go out later); no wait."""
        info = self.client.client.publish(
            message.topic,
            message.payload,
            qos=message.qos,
            retain=message.retain,
            properties=message.properties,
        )
        assert info.rc in _QUEUED, f"paho dropped {message}: {mqtt.error_string(info.rc)}"
        with self._lock:
            self._sent.append((message, info))
        return info

    def send_all(self, messages: Iterable[Message]) -> None:
        """:meth:`send` each of ``messages``, in order."""
        for message in messages:
            self.send(message)

    @property
    def sent(self) -> int:
        """How many messages were sent so far."""
        with self._lock:
            return len(self._sent)

    def acknowledged(self) -> int:
        """How many of the messages sent so far the broker has acknowledged (a prefix)."""
        with self._lock:
            sent = list(self._sent)
        count = 0
        for _, info in sent:
            if not info.is_published():
                break
            count += 1
        return count

    def wait_acknowledged(self, count: int | None = None, timeout: float = ACK_TIMEOUT) -> None:
        """Wait until the broker has acknowledged at least ``count`` messages (by default,
        every message sent so far)."""
        wanted = self.sent if count is None else count
        wait_until(
            lambda: self.acknowledged() >= wanted,
            timeout,
            interval=0.05,
            message=lambda: f"the broker acknowledged {self.acknowledged()} of {wanted} messages",
        )

    def confirm(self, since: int = 0, timeout: float = PUBLISH_TIMEOUT) -> list[Message]:
        """Wait for the broker to acknowledge each message sent from the ``since``-th on, and
        fail on the first one it does not; returns those messages, in sending order."""
        with self._lock:
            sent = self._sent[since:]
        for message, info in sent:
            info.wait_for_publish(timeout)
            assert info.is_published(), f"the broker did not take {message}"
        return [message for message, _ in sent]

    def publish(self, messages: Iterable[Message], timeout: float = PUBLISH_TIMEOUT) -> None:
        """Send ``messages`` in order, then wait until the broker took every one."""
        start = self.sent
        self.send_all(messages)
        self.confirm(start, timeout)

    def disconnect(self) -> None:
        """DISCONNECT and wait for the connection to close."""
        self.client.disconnect()

    def close(self) -> None:
        """Best-effort disconnect (a test's ``finally``)."""
        self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def publish(
    broker: BrokerProcess,
    messages: Sequence[Message],
    *,
    protocol: mqtt.MQTTProtocolVersion = mqtt.MQTTv311,
    username: str | None = None,
    password: str | None = None,
) -> None:
    """Publish ``messages`` in order with a new paho client at ``protocol`` (messages with
    properties need ``paho.mqtt.client.MQTTv5``) and wait until the broker took every one."""
    publisher = Publisher(
        broker.host, broker.port, protocol=protocol, username=username, password=password
    )
    try:
        publisher.publish(messages)
    finally:
        publisher.disconnect()


def queue_for_session(
    broker: BrokerProcess, client_id: str, topic_filter: str, qos: int, messages: Sequence[Message]
) -> None:
    """Messages queued for a query that has not started: ``client_id``'s persistent session is
    made first (clean session off, subscribed to ``topic_filter`` at ``qos``), then
    ``messages`` are published, and the broker queues every QoS 1 and QoS 2 one for the
    session. A ``Trigger.AvailableNow`` run with that client id then drains a known set of
    messages and ends by itself. Returns once the broker took every message."""
    create_session(broker.url, client_id, topic_filter, qos)
    publish(broker, messages)


class SteadyPublisher(threading.Thread):
    """Publishes ``<tag>-<n>`` on ``topic`` at ``qos``, about ``rate`` per second, from
    ``start()`` until ``finish()``, and knows which ones the broker acknowledged, so a test can
    wait for traffic to have flowed."""

    def __init__(self, host: str, port: int, topic: str, qos: int, rate: float) -> None:
        super().__init__(daemon=True, name="steady-publisher")
        self.topic = topic
        self.qos = qos
        self.rate = rate
        self.tag = f"s{uuid.uuid4().hex[:6]}"
        self.publisher = Publisher(host, port, client_id=unique_id("steady-"))
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        number = 0
        try:
            while not self._halt.is_set():
                pause = began + number / self.rate - time.monotonic()
                if pause > 0 and self._halt.wait(pause):  # pacing the load
                    break
                payload = f"{self.tag}-{number:07d}".encode()
                self.publisher.send(Message(self.topic, payload, self.qos))
                number += 1
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def acknowledged(self) -> int:
        """How many of the messages sent so far the broker has acknowledged (a prefix)."""
        return self.publisher.acknowledged()

    def wait_acknowledged(self, count: int, timeout: float = ACK_TIMEOUT) -> None:
        """Wait until the broker has acknowledged at least ``count`` messages."""
        self.publisher.wait_acknowledged(count, timeout)

    def finish(self, timeout: float = ACK_TIMEOUT) -> list[bytes]:
        """Stop publishing, wait until the broker acknowledged every message sent, disconnect;
        the payloads, in publishing order."""
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), "the publisher did not stop"
        if self.error is not None:
            raise self.error
        sent = self.publisher.confirm(timeout=timeout)
        self.publisher.disconnect()
        return [message.payload for message in sent]

    def close(self) -> None:
        """Stop without checking (a test's ``finally``)."""
        self._halt.set()
        self.join(5)
        self.publisher.close()


class PacedPublisher(threading.Thread):
    """Publishes ``messages`` at about ``rate`` per second in the background.

    ``hold_at``: after that many messages it waits until ``release()`` (a test's kill), so it
    is still sending when the kill comes however slowly the job got there."""

    def __init__(
        self,
        broker: BrokerProcess,
        messages: Sequence[Message],
        rate: float,
        hold_at: int | None = None,
    ) -> None:
        super().__init__(daemon=True, name="paced-publisher")
        self.broker = broker
        self.messages = list(messages)
        self.rate = rate
        self.hold_at = hold_at
        self.released = threading.Event()
        self.error: BaseException | None = None
        self.sent = 0

    def release(self) -> None:
        """Let a publisher held at ``hold_at`` go on."""
        self.released.set()

    def run(self) -> None:
        try:
            publisher = Publisher(self.broker.host, self.broker.port, client_id=unique_id("paced-"))
            began = time.monotonic()
            for index, message in enumerate(self.messages):
                if index == self.hold_at and not self.released.is_set():
                    held = time.monotonic()
                    assert self.released.wait(HOLD_TIMEOUT), "the publisher was never released"
                    began += time.monotonic() - held
                pause = began + index / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the load, not waiting for a condition
                publisher.send(message)
                self.sent += 1
            publisher.confirm()
            publisher.disconnect()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def finish(self, timeout: float = 120.0) -> None:
        self.join(timeout)
        assert not self.is_alive(), "the publisher did not finish"
        if self.error is not None:
            raise self.error


def publish_with_cli(
    broker: BrokerProcess, topic: str, qos: int, count: int, size: int = 20
) -> None:
    """Publish ``count`` messages of ``size`` bytes on ``topic`` at ``qos`` with our own
    client's ``python -m connector.mqtt pub``; return when the command has finished."""
    subprocess.run(
        pub_command(broker.url, topic, qos, count, size),
        check=True,
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=CLI_TIMEOUT,
    )
