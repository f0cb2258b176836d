"""Backlogs on a broker, made with our own client for the benchmarks and the tests: a
persistent session made ahead of its receiver (:func:`create_session`), so that the broker
queues for it; messages published with at most a window of them unacknowledged
(:func:`publish_windowed`); and the command line of the client's ``pub``
(:func:`pub_command`), run as a process of its own.

The client is imported where it is used: a benchmark's peer process that imports this module
(through ``bench.common``) and never calls them does not load it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from connector.mqtt.packets import ProtocolLevel

MOSQUITTO_INFLIGHT = 20
"""Mosquitto's default ``max_inflight_messages``: a publisher keeps at most this many QoS 1/2
messages unacknowledged (beyond it Mosquitto acknowledges but drops incoming QoS 2)."""


class BacklogError(RuntimeError):
    """A backlog could not be made: the session already existed, or publishing stalled."""


def pub_command(url: str, topic: str, qos: int, count: int, size: int) -> list[str]:
    """The command that publishes ``count`` messages of ``size`` bytes on ``topic`` at ``qos``
    with our client's ``pub`` (:mod:`connector.mqtt.cli`); run it in ``devtools.REPO_ROOT``."""
    return [
        sys.executable, "-m", "connector.mqtt", "pub", "--broker", url, "--topic", topic,
        "--qos", str(qos), "--count", str(count), "--size", str(size),
    ]  # fmt: skip


def create_session(
    url: str,
    client_id: str,
    topic_filter: str,
    qos: int = 1,
    *,
    level: ProtocolLevel | None = None,
) -> None:
    """Connect with clean_session=False at ``level`` (by default 3.1.1; at 5 with a Session
    Expiry Interval that never ends), subscribe ``topic_filter`` with ``qos``, leave: the
    broker keeps the session and queues what matches until the client comes back. Raises
    :class:`BacklogError` when the broker already had a session for ``client_id``."""
    from connector.mqtt.config import SessionConfig
    from connector.mqtt.driver import MqttClient
    from connector.mqtt.packets import ProtocolLevel

    config = SessionConfig(client_id, clean_session=False, level=level or ProtocolLevel.MQTT_3_1_1)
    client = MqttClient(url, config, [(topic_filter, qos)])
    if client.connect().session_present:
        raise BacklogError(f"the broker already had a session for {client_id!r}")
    client.disconnect()


def publish_windowed(
    url: str,
    count: int,
    message: Callable[[int], tuple[str, bytes]],
    timeout: float,
    qos: int = 1,
    inflight: int = MOSQUITTO_INFLIGHT,
) -> float:
    """Publish messages ``message(0) .. message(count - 1)`` (topic, payload) with our client,
    at most ``inflight`` unacknowledged; returns the rate once the broker acknowledged every
    one, i.e. queued it. Raises :class:`BacklogError` when publishing stalls or the
    connection is lost."""
    from connector.mqtt.config import SessionConfig
    from connector.mqtt.driver import MqttClient

    client = MqttClient(url, SessionConfig(f"bench-pub-{time.time_ns()}"), [])
    with client:
        client.connect()
        session = client.session
        start = time.monotonic()
        deadline = start + timeout
        sent = 0
        while sent < count or session.outbound_in_flight:
            if time.monotonic() > deadline:
                raise BacklogError(f"publishing stalled at {sent} of {count} messages")
            room = min(inflight - session.outbound_in_flight, count - sent)
            if room <= 0:
                client.pump(1.0)
                continue
            now = time.monotonic()
            for seq in range(sent, sent + room):
                topic, payload = message(seq)
                session.publish(topic, payload, qos, now)
            sent += room
            client.flush()
            if not client.connected:
                raise BacklogError(f"lost the connection to {url} while publishing")
        return count / (time.monotonic() - start)
