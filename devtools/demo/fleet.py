"""The simulated sensor fleet: its plan (devices, QoS, payloads, a few malformed ones) and the
threads that publish it, paced, each with at most :data:`INFLIGHT` messages in flight."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from devtools.demo.errors import DemoFailed

log = logging.getLogger(__name__)

SITES = ("north", "south", "east", "west")
INFLIGHT = 20
"""Mosquitto's default ``max_inflight_messages``: it drops incoming QoS 2 messages beyond it."""
STATUS_EVERY = 10
"""With ``--routes``: a device's status message before its first reading and every tenth."""
STATES = ("running", "idle", "maintenance")
MALFORMED: tuple[bytes, ...] = (
    b"temperature=21.5;humidity=40",  # not JSON
    b'{"device": "x", "ts": "2025-01-01T00:00:00Z", "temperat',  # truncated JSON
    b"\xff\xfe\x00\x80garbage",  # not UTF-8
)


@dataclass
class Device:
    """One simulated sensor: where it publishes, at which QoS, and its payloads in order."""

    name: str
    site: str
    qos: int
    payloads: list[bytes] = field(default_factory=list)
    valid: int = 0
    malformed: int = 0
    statuses: list[bytes] = field(default_factory=list)
    """With ``--routes``: status messages, JSON of varying shape (a VARIANT column)."""

    @property
    def topic(self) -> str:
        return f"plant/{self.site}/{self.name}/telemetry"

    @property
    def status_topic(self) -> str:
        return f"plant/{self.site}/{self.name}/status"

    def messages(self) -> list[tuple[str, bytes]]:
        """What the device publishes, in order: its readings, and a status message before
        every :data:`STATUS_EVERY`-th one when it has statuses."""
        out: list[tuple[str, bytes]] = []
        for index, payload in enumerate(self.payloads):
            if self.statuses and index % STATUS_EVERY == 0:
                out.append((self.status_topic, self.statuses[index // STATUS_EVERY]))
            out.append((self.topic, payload))
        return out


def status_payload(device: str, number: int) -> bytes:
    """Status message ``number`` of ``device``: its state, sometimes its firmware, and alarms
    in maintenance; the shape varies, as devices' status documents do."""
    state = STATES[number % len(STATES)]
    document: dict[str, object] = {"device": device, "n": number, "state": state}
    if number % 2 == 0:
        document["firmware"] = {"version": f"1.4.{number % 5}", "channel": "stable"}
    if state == "maintenance":
        document["alarms"] = [{"code": 17, "text": "filter due"}]
    return json.dumps(document).encode()


def malformed_count(messages: int) -> int:
    """How many of ``messages`` are malformed: about 1 %, and at least a few in small runs."""
    return max(min(3, messages // 10), messages // 100)


def plan_fleet(
    messages: int, devices: int, seed: int = 7, *, statuses: bool = False
) -> list[Device]:
    """Deal ``messages`` round-robin to ``devices`` sensors; a few random ones are malformed.

    Valid readings carry ``seq`` 0, 1, 2, ... per device, so the table can be checked for gaps
    and duplicates. Even-numbered devices publish with QoS 1, odd-numbered ones with QoS 2.
    With ``statuses``, each device also publishes status messages (:meth:`Device.messages`).
    The plan is the same for the same arguments.
    """
    rng = random.Random(seed)
    fleet = [
        Device(f"sensor-{i + 1:02d}", SITES[i % len(SITES)], 1 if i % 2 == 0 else 2)
        for i in range(devices)
    ]
    bad_at = set(rng.sample(range(messages), malformed_count(messages)))
    base = {d.name: 20.0 + rng.uniform(-3, 3) for d in fleet}
    for index in range(messages):
        device = fleet[index % devices]
        if index in bad_at:
            device.payloads.append(MALFORMED[index % len(MALFORMED)])
            device.malformed += 1
            continue
        reading = {
            "device": device.name,
            "ts": "",  # filled in when published
            "temperature": round(base[device.name] + rng.gauss(0, 0.5), 2),
            "humidity": round(rng.uniform(30, 60), 1),
            "seq": device.valid,
        }
        device.payloads.append(json.dumps(reading).encode())
        device.valid += 1
    if statuses:
        for device in fleet:
            count = -(-len(device.payloads) // STATUS_EVERY)
            device.statuses = [status_payload(device.name, n) for n in range(count)]
    return fleet


def stamp(payload: bytes) -> bytes:
    """Put the publication time into a planned reading; malformed payloads stay as they are."""
    marker = b'"ts": ""'
    if marker not in payload:
        return payload
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    return payload.replace(marker, f'"ts": "{now}"'.encode(), 1)


class Publisher(threading.Thread):
    """Publishes one device's payloads, paced over ``duration`` seconds, <= INFLIGHT in flight.

    ``acked`` counts the messages the broker acknowledged (PUBACK for QoS 1, PUBCOMP for
    QoS 2): the demo's "published" figure.
    """

    def __init__(
        self, device: Device, broker_url: str, duration: float, stop: threading.Event
    ) -> None:
        super().__init__(name=f"publisher-{device.name}", daemon=True)
        self.device = device
        self.broker_url = broker_url
        self.duration = duration
        self.stop_event = stop
        self.acked = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._publish_all()
        except Exception as exc:  # reported by the demo, which fails the run
            self.error = f"{self.device.name}: {exc}"
            log.debug("publisher failed", exc_info=True)

    def _publish_all(self) -> None:
        config = SessionConfig(client_id=f"demo-{self.device.name}", clean_session=True)
        client = MqttClient(self.broker_url, config, connect_timeout=10.0)
        client.connect()
        try:
            session = client.session
            payloads = self.device.messages()
            interval = self.duration / max(1, len(payloads))
            start = time.monotonic()
            sent = 0
            while sent < len(payloads):
                if self.stop_event.is_set():
                    return
                if session.outbound_in_flight >= INFLIGHT:
                    self.acked += client.pump(0.2)
                    continue
                wait = start + sent * interval - time.monotonic()
                if wait > 0:  # pacing: read acknowledgements until the next reading is due
                    self.acked += client.pump(min(wait, 0.2))
                    continue
                topic, payload = payloads[sent]
                client.publish(topic, stamp(payload), self.device.qos)
                sent += 1
            deadline = time.monotonic() + 30.0
            while session.outbound_in_flight and time.monotonic() < deadline:
                if self.stop_event.is_set():
                    return
                self.acked += client.pump(0.2)
            if session.outbound_in_flight:
                raise DemoFailed(f"{session.outbound_in_flight} message(s) never acknowledged")
            if client.connections != 1:
                raise DemoFailed("the connection dropped while publishing: messages may be lost")
        finally:
            client.disconnect()


def join_all(publishers: Sequence[Publisher], stop: threading.Event) -> None:
    """Stop the publishers still running and wait for them to disconnect."""
    stop.set()
    for publisher in publishers:
        publisher.join(10.0)
