"""Steady traffic for tests: a publisher thread that sends numbered payloads at a fixed QoS and
about a fixed rate until stopped, and knows which ones the broker acknowledged (PUBACK /
PUBCOMP), so a test can wait for traffic to have flowed and check a table or a WAL against
every message published."""

from __future__ import annotations

import threading
import time
import uuid

from paho.mqtt.client import MQTTMessageInfo

from tests.mqtt_clients import PahoClient
from tests.waiting import wait_until

ACK_TIMEOUT = 60.0


class SteadyPublisher(threading.Thread):
    """Publishes ``<tag>-<n>`` on ``topic`` at ``qos``, about ``rate`` per second, from
    ``start()`` until ``finish()``; paho keeps at most 20 QoS 1/2 messages in flight (the
    broker's window) and queues the rest."""

    def __init__(self, host: str, port: int, topic: str, qos: int, rate: float) -> None:
        super().__init__(daemon=True, name="steady-publisher")
        self.topic = topic
        self.qos = qos
        self.rate = rate
        self.tag = f"s{uuid.uuid4().hex[:6]}"
        self.client = PahoClient(f"steady-{uuid.uuid4().hex[:12]}")
        outcome = self.client.connect(host, port)
        assert outcome.accepted, f"publisher refused by {host}:{port}: {outcome}"
        self.error: BaseException | None = None
        self._sent: list[tuple[bytes, MQTTMessageInfo]] = []
        self._lock = threading.Lock()
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
                info = self.client.client.publish(self.topic, payload, qos=self.qos)
                with self._lock:
                    self._sent.append((payload, info))
                number += 1
        except BaseException as exc:  # reported by finish()
            self.error = exc

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

    def wait_acknowledged(self, count: int, timeout: float = ACK_TIMEOUT) -> None:
        """Wait until the broker has acknowledged at least ``count`` messages."""
        wait_until(
            lambda: self.acknowledged() >= count,
            timeout,
            interval=0.05,
            message=lambda: f"the broker acknowledged {self.acknowledged()} of {count} messages",
        )

    def finish(self, timeout: float = ACK_TIMEOUT) -> list[bytes]:
        """Stop publishing, wait until the broker acknowledged every message sent, disconnect;
        the payloads, in publishing order."""
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), "the publisher did not stop"
        if self.error is not None:
            raise self.error
        with self._lock:
            sent = list(self._sent)
        for payload, info in sent:
            info.wait_for_publish(timeout)
            assert info.is_published(), f"the broker did not acknowledge {payload!r}"
        self.client.disconnect()
        return [payload for payload, _ in sent]

    def close(self) -> None:
        """Stop without checking (a test's ``finally``)."""
        self._halt.set()
        self.join(5)
        self.client.close()
