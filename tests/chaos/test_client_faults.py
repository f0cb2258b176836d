"""The MQTT client behind the chaos proxy: a stalled (half-open) connection is detected by
keep-alive within 1.5 x the interval; a broker that never sends CONNACK gives a clear error or
retries with backoff, never a hang; byte-sized fragments and cuts lose nothing.

Times are read on the driver's own clock (its ``clock`` is wrapped to record the readings) and
from its log, never from sleeps in the test.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient, ReconnectPolicy
from connector.mqtt.errors import KeepAliveTimeout
from connector.mqtt.packets import Publish
from devtools.fault_proxy import FaultProxy
from tests.support.brokers import BrokerFactory
from tests.support.ledger import Ledger, LedgerPublisher, Tally, settle
from tests.support.waiting import wait_until

KEEP_ALIVE = 1
SCHEDULING_SLACK = 0.3
"""Allowed lateness of a thread waking up on a busy two-core machine, in seconds."""
LOST = re.compile(r"connection to \S+ lost: no packet from the broker for ([0-9.]+) s")


class RecordingClock:
    """``time.monotonic`` that remembers its last reading (the driver's view of now)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self) -> float:
        self.last = time.monotonic()
        return self.last


def drain(client: MqttClient, received: list[Publish]) -> None:
    read = client.poll(0.1)
    received.extend(read.messages)
    client.acknowledge(read.messages, read.released)


def draining(
    client: MqttClient, received: list[Publish], until: Callable[[], bool]
) -> Callable[[], bool]:
    """A predicate for ``wait_until``: drain the client, then ``until()``."""

    def check() -> bool:
        drain(client, received)
        return until()

    return check


def delivered(received: list[Publish]) -> list[bytes]:
    """Payloads delivered, each once. Without a WAL the plain client hands on what the broker
    redelivers after a lost acknowledgement; such a repeat must carry DUP=1 (section 4.4)."""
    seen: set[bytes] = set()
    for message in received:
        if message.payload in seen:
            assert message.dup, f"a repeat without DUP=1: {message}"
        seen.add(message.payload)
    return sorted(seen)


def test_keep_alive_detects_a_stalled_peer_within_one_and_a_half_intervals(
    broker_factory: BrokerFactory,
    proxy_to,
    tally: Tally,
    ledger: Ledger,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = broker_factory()
    proxy: FaultProxy = proxy_to(broker)
    clock = RecordingClock()
    client = MqttClient(
        proxy.url,
        SessionConfig(f"ka-{uuid.uuid4().hex[:8]}", clean_session=False, keep_alive=KEEP_ALIVE),
        [("ka/#", 2)],
        reconnect=ReconnectPolicy(initial=0.05, maximum=0.2),
        connect_timeout=2,
        clock=clock,
    )
    publisher = LedgerPublisher(broker.host, broker.port, "ka/t", ledger)
    received: list[Publish] = []
    try:
        client.connect()
        publisher.publish(20)
        wait_until(draining(client, received, lambda: len(delivered(received)) >= 20), 10)
        detections = []
        rounds = 3
        for _ in range(rounds):
            # Everything read so far is acknowledged; the peer now goes silent, its socket
            # open (new connections flow, so the client can come back).
            with caplog.at_level(logging.WARNING, logger="connector.mqtt"):
                caplog.clear()
                stalled_at = clock()
                assert proxy.stall() >= 1
                wait_until(
                    lambda: client.poll(0.05) is not None and not client.connected,
                    5 * KEEP_ALIVE,
                    message="the stalled connection was never declared dead",
                )
                detected_at = clock.last
            proxy.resume()  # the abandoned connection's sockets now close
            silent = [float(m.group(1)) for r in caplog.records if (m := LOST.search(r.message))]
            assert silent, caplog.text
            detections.append((detected_at - stalled_at, silent[0]))
            tally.add("keepalive_detections")
            publisher.publish(10)  # queued for the session while the client is away
            wait_until(
                draining(
                    client, received, lambda: len(delivered(received)) >= len(ledger.published)
                ),
                10,
            )
        for since_stall, since_last_packet in detections:
            # Detection comes 1.5 x keep-alive after the last packet received (PINGREQ after
            # one interval of silence, then half an interval for PINGRESP), never later.
            assert since_last_packet <= 1.5 * KEEP_ALIVE + SCHEDULING_SLACK, detections
            assert since_last_packet >= 1.5 * KEEP_ALIVE - 0.2, detections
            assert since_stall <= 1.5 * KEEP_ALIVE + SCHEDULING_SLACK, detections
        assert client.connections == 1 + rounds
    finally:
        client.disconnect()
        publisher.close()
        tally.add_proxy(proxy)
    settle(tally, ledger, delivered(received))


def test_a_broker_that_never_sends_connack_gives_an_error_or_backoff_never_a_hang(
    broker_factory: BrokerFactory, proxy_to, tally: Tally, ledger: Ledger,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    broker = broker_factory()
    proxy: FaultProxy = proxy_to(broker)
    connect_timeout = 0.5
    clock = RecordingClock()
    client = MqttClient(
        proxy.url,
        SessionConfig(f"nc-{uuid.uuid4().hex[:8]}", clean_session=False, keep_alive=30),
        [("nc/#", 2)],
        reconnect=ReconnectPolicy(initial=0.1, maximum=0.8),
        connect_timeout=connect_timeout,
        clock=clock,
    )
    publisher = LedgerPublisher(broker.host, broker.port, "nc/t", ledger)
    received: list[Publish] = []
    try:
        # The broker keeps a session for the client; then it stops answering CONNECT.
        client.connect()
        client.close()
        proxy.blackhole(True)
        # At start: a typed error naming what was missing, after connect_timeout.
        began = clock()
        with pytest.raises(KeepAliveTimeout, match=r"did not answer with CONNACK within 0.5 s"):
            client.connect()
        assert clock() - began < connect_timeout + SCHEDULING_SLACK
        # Later (poll reconnects): every poll returns within its timeout plus one attempt,
        # and the attempts back off.
        with caplog.at_level(logging.WARNING, logger="connector.mqtt"):
            for _ in range(8):
                began = clock()
                assert client.poll(0.2).messages == []
                assert clock() - began < 0.2 + connect_timeout + SCHEDULING_SLACK
        delays = [
            float(m.group(1))
            for r in caplog.records
            if "CONNACK" in r.message and (m := re.search(r"retrying in ([0-9.]+) s", r.message))
        ]
        assert len(delays) >= 3, caplog.text
        assert max(delays) > 2 * min(delays), f"no backoff: {delays}"
        assert proxy.stats.blackholed >= 1 + len(delays)
        assert client.connections == 1

        # The broker answers again: the client connects and gets what was queued meanwhile.
        publisher.publish(30)
        proxy.blackhole(False)
        wait_until(
            draining(client, received, lambda: len(delivered(received)) >= 30),
            15,
            message="nothing arrived",
        )
    finally:
        client.disconnect()
        publisher.close()
        tally.add_proxy(proxy)
    settle(tally, ledger, delivered(received))


def test_fragments_cuts_and_malformed_frames_lose_nothing(
    broker_factory: BrokerFactory, proxy_to, tally: Tally, ledger: Ledger, rng
) -> None:
    broker = broker_factory()
    proxy: FaultProxy = proxy_to(broker)
    client = MqttClient(
        proxy.url,
        SessionConfig(f"fr-{uuid.uuid4().hex[:8]}", clean_session=False, keep_alive=10),
        [("fr/#", 2)],
        reconnect=ReconnectPolicy(initial=0.01, maximum=0.1),
        connect_timeout=2,
    )
    publisher = LedgerPublisher(broker.host, broker.port, "fr/t", ledger)
    received: list[Publish] = []
    try:
        client.connect()
        for step in range(6):
            proxy.fragment(rng.choice([1, 1, 2, 3, 7]) if step % 2 == 0 else None)
            publisher.publish(40)
            fault = step % 3
            if fault == 1:
                proxy.cut()
            elif fault == 2:
                # A PUBLISH with QoS 3 (section 3.3.1.2) slipped in after a good frame.
                proxy.inject(bytes([0x36, 0x05, 0x00, 0x01, 0x61, 0x00, 0x01]))
            wait_until(
                draining(
                    client, received, lambda: len(delivered(received)) >= len(ledger.published)
                ),
                20,
                message=lambda: f"{len(delivered(received))}/{len(ledger.published)} received",
            )
        assert proxy.stats.fragments > 0 and proxy.stats.cuts > 0
    finally:
        client.disconnect()
        publisher.close()
        tally.add_proxy(proxy)
    settle(tally, ledger, delivered(received))
