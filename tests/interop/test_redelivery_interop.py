"""The receiver (MQTT -> WAL -> ack, no Spark) across stops and restarts, against Mosquitto,
mochi-mqtt and aedes.

Each scenario counts exactly what the WAL stored. The brokers differ in what they send after
a reconnect (the `trace` lines of their logs show it): Mosquitto numbers a session's messages
on across connections and sets DUP=1 on resends only; mochi-mqtt 2.7.9 sends messages queued
for an offline session with DUP=1 although they were never sent, numbered from 1 again after
every reconnect; aedes 1.2.0 starts every connection's packet ids at a random number, never
sets DUP=1, and resends QoS 2 messages whose exchange completed (`RESENDS_COMPLETED_QOS2`).
Where such a broker fault makes the receiver store a message twice, the extra rows must equal
what the receivers reported as possible duplicates (`stats.possible_duplicates`).

Publishers are paho-mqtt clients with their own client id and a clean session; every publish
is acknowledged by the broker (on_publish) before the test goes on.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from connector.wal import WalReader
from devtools.fault_proxy import FaultProxy
from devtools.interop_brokers import ExternalBroker
from tests.support.brokers import InteropBroker
from tests.support.publishing import Message, Publisher
from tests.support.waiting import wait_until

log = logging.getLogger(__name__)

QOS = [pytest.param(1, id="qos1"), pytest.param(2, id="qos2")]
SETTLED_QUIET = 0.3
"""Seconds without a new WAL row after everything expected is in (catches trailing extras)."""
STALLED_QUIET = 2.0
"""Seconds without a new WAL row after which a WAL still short of the expected count is taken
as final (the broker has nothing more to send)."""
TIMEOUT = 60.0
RESENDS_COMPLETED_QOS2 = frozenset({"aedes"})
"""Brokers that, on the next connection, resend QoS 2 messages whose exchange completed
(PUBCOMP received), with DUP=0, the same packet id and payload: aedes-persistence 11.0.0's
in-memory `outgoingUpdate` matches a PUBREL against another PUBREL already stored (neither has
a broker id) and renames that one, so the completed message's PUBLISH stays queued whenever
two exchanges await PUBCOMP at once. Such a resend is indistinguishable from a new message
with a reused id: the receiver stores it and counts it as a possible duplicate."""


def publisher_to(broker: InteropBroker) -> Publisher:
    """A connected paho-mqtt publisher with a clean session."""
    return Publisher(broker.broker.host, broker.broker.port, client_id="interop-publisher")


class Run:
    """The receivers one test starts on one WAL directory and client id, in turn."""

    def __init__(
        self, broker: InteropBroker, wal: Path, qos: int, client_id: str, url: str | None = None
    ) -> None:
        """`url` reaches the broker another way (a proxy); by default, `broker.url`."""
        self.broker = broker
        self.wal = wal
        self.options = SourceOptions.parse(
            {
                "brokerUrl": url or broker.url,
                "topic": "x/#",
                "qos": str(qos),
                "walPath": str(wal),
                "clientId": client_id,
                "keepAlive": "30",
            }
        )
        self.receivers: list[Receiver] = []
        self.running: list[Receiver] = []
        self.end = 0

    def start(self) -> Receiver:
        """A new receiver on the run's WAL, connected (persistent session)."""
        receiver = Receiver(self.options)
        receiver.start()
        self.receivers.append(receiver)
        self.running.append(receiver)
        return receiver

    def stop(self, receiver: Receiver) -> None:
        """Stop `receiver` (DISCONNECT) and note where its WAL ends."""
        self.running.remove(receiver)
        receiver.stop()
        self.end = receiver.wal.next_offset
        receiver.check()

    def settle(self, receiver: Receiver, expected: int, timeout: float = TIMEOUT) -> int:
        """Wait until the WAL holds `expected` rows with no QoS 2 exchange open and nothing
        new arrived for `SETTLED_QUIET` s, or until it grew no more for `STALLED_QUIET` s;
        returns the row count."""
        last = [-1, time.monotonic()]

        def settled() -> bool:
            receiver.check()
            rows = receiver.wal.next_offset
            now = time.monotonic()
            if rows != last[0]:
                last[:] = [rows, now]
            done = rows >= expected and not receiver.wal.qos2_pending
            return now - last[1] >= (SETTLED_QUIET if done else STALLED_QUIET)

        wait_until(
            settled,
            timeout,
            message=lambda: f"{self.broker}: WAL still growing at {receiver.wal.next_offset}",
        )
        return receiver.wal.next_offset

    def payloads(self) -> list[bytes]:
        """Every payload the WAL stored, in order."""
        return [bytes(p) for p in WalReader(self.wal).read(0, self.end).payloads]

    def possible_duplicates(self) -> int:
        """What the receivers reported as possibly stored twice (a broker's resend that the
        receiver could not tell from a new message)."""
        return sum(r.stats.possible_duplicates for r in self.receivers)

    def broker_faults(self) -> dict[str, int]:
        """The broker faults the receivers saw, by rule, summed."""
        total: Counter[str] = Counter()
        for receiver in self.receivers:
            total.update(receiver.stats.broker_faults)
        return dict(total)

    def summary(self, expected: int, payloads: list[bytes], *, numbered: bool = True) -> str:
        """One line on what was stored, for assertion messages and the log. For numbered
        payloads, duplicates are rows beyond the first of each number."""
        if numbered:
            distinct = len(set(payloads))
            detail = (
                f"{len(payloads) - distinct} duplicate rows, "
                f"{len(missing_numbers(payloads, expected))} missing"
            )
        else:
            detail = f"{len(payloads) - expected:+d} rows"
        dropped = sum(r.stats.duplicates_dropped for r in self.receivers)
        line = (
            f"{self.broker.name}: expected {expected}, stored {len(payloads)} ({detail}), "
            f"possible_duplicates={self.possible_duplicates()}, "
            f"broker_faults={self.broker_faults()}, dropped as redeliveries={dropped}"
        )
        log.info("%s", line)
        return line

    def close(self) -> None:
        """Stop every receiver still running (a failed test)."""
        while self.running:
            self.running.pop().stop()


@pytest.fixture
def publisher(interop_broker: InteropBroker) -> Iterator[Publisher]:
    """A connected paho-mqtt publisher with a clean session."""
    pub = publisher_to(interop_broker)
    yield pub
    pub.disconnect()


def make_run(broker: InteropBroker, tmp_path: Path, qos: int, name: str) -> Run:
    """A run on a WAL in `tmp_path`, with a client id unique to the scenario."""
    return Run(broker, tmp_path / "wal", qos, f"interop-{name}-q{qos}")


def numbered(count: int) -> list[bytes]:
    """Payloads b"0" .. b"<count - 1>"."""
    return [str(n).encode() for n in range(count)]


def missing_numbers(payloads: list[bytes], count: int) -> list[int]:
    """The numbers 0..count-1 the WAL lacks."""
    return sorted(set(range(count)) - {int(p) for p in payloads})


@pytest.mark.parametrize("qos", QOS)
def test_identical_payloads_queued_across_restarts_are_all_stored(
    interop_broker: InteropBroker, publisher: Publisher, tmp_path: Path, qos: int
) -> None:
    """Twice, 10 identical messages (`x/a`, `ON`) queued while the receiver is down are
    all stored when it comes back: 20 rows. Equal topic and payload under a packet id the
    broker used before is a new message, not a resend, when the broker never sent it (mochi
    numbers both batches 1-10, with DUP=1). A broker that resends completed QoS 2 messages
    (aedes) may add rows, each counted as a possible duplicate."""
    run = make_run(interop_broker, tmp_path, qos, "same")
    try:
        run.stop(run.start())  # creates the persistent session
        publisher.send_all(Message("x/a", p, qos) for p in [b"ON"] * 10)
        publisher.wait_acknowledged()
        first = run.start()
        run.settle(first, 10)
        run.stop(first)
        publisher.send_all(Message("x/a", p, qos) for p in [b"ON"] * 10)
        publisher.wait_acknowledged()
        second = run.start()
        run.settle(second, 20)
        run.stop(second)
    finally:
        run.close()
    payloads = run.payloads()
    summary = run.summary(20, payloads, numbered=False)
    assert set(payloads) == {b"ON"}, summary
    if qos == 2 and interop_broker.name in RESENDS_COMPLETED_QOS2:
        assert len(payloads) - 20 == run.possible_duplicates(), summary
    else:
        assert len(payloads) == 20, summary


def test_qos2_backlog_across_a_stop_in_mid_stream(
    interop_broker: InteropBroker, publisher: Publisher, tmp_path: Path
) -> None:
    """2,000 numbered QoS 2 messages; the receiver is stopped while they flow (at least 300
    stored, half not yet published) and a new one drains the rest: every number is stored,
    and any extra row is one the receivers reported as a possible duplicate."""
    count = 2_000
    payloads_out = numbered(count)
    run = make_run(interop_broker, tmp_path, 2, "backlog")
    try:
        first = run.start()
        publisher.send_all(Message("x/n", p, 2) for p in payloads_out[: count // 2])
        wait_until(
            lambda: first.wal.next_offset >= 300,
            TIMEOUT,
            message=lambda: f"{interop_broker}: {first.wal.next_offset} of 300 stored",
        )
        errors: list[BaseException] = []

        def stop_first() -> None:
            try:
                run.stop(first)
            except BaseException as exc:
                errors.append(exc)

        stopping = threading.Thread(target=stop_first, name="stop-receiver")
        stopping.start()
        # while the receiver stops
        publisher.send_all(Message("x/n", p, 2) for p in payloads_out[count // 2 :])
        stopping.join(TIMEOUT)
        assert not stopping.is_alive(), "Receiver.stop() did not return"
        if errors:
            raise errors[0]
        stored_at_stop = run.end
        publisher.wait_acknowledged()
        second = run.start()
        run.settle(second, count)
        run.stop(second)
    finally:
        run.close()
    payloads = run.payloads()
    summary = run.summary(count, payloads) + f", {stored_at_stop} stored by the first receiver"
    assert stored_at_stop < count, summary
    assert missing_numbers(payloads, count) == [], summary
    assert len(payloads) - count == run.possible_duplicates(), summary


@pytest.mark.parametrize("qos", QOS)
def test_messages_queued_for_a_persistent_session_are_stored(
    interop_broker: InteropBroker, publisher: Publisher, tmp_path: Path, qos: int
) -> None:
    """500 numbered messages published while the receiver is down are all stored when it
    comes back: exactly once at QoS 2; at QoS 1 any extra row is one the receivers reported
    as a possible duplicate."""
    count = 500
    run = make_run(interop_broker, tmp_path, qos, "offline")
    try:
        run.stop(run.start())  # connected once: the session exists
        publisher.send_all(Message("x/o", p, qos) for p in numbered(count))
        publisher.wait_acknowledged()
        receiver = run.start()
        run.settle(receiver, count)
        run.stop(receiver)
    finally:
        run.close()
    payloads = run.payloads()
    summary = run.summary(count, payloads)
    assert missing_numbers(payloads, count) == [], summary
    if qos == 2:
        assert len(payloads) == count, summary
    else:
        assert len(payloads) - count == run.possible_duplicates(), summary


QOS_ABOVE_GRANTED = "qos-above-granted"
FAULT_LOGGER = "connector.mqtt.session"


def fault_warnings(caplog: pytest.LogCaptureFixture, rule: str) -> list[logging.LogRecord]:
    """The WARNING records of the session's `broker fault <rule>` line."""
    return [
        r
        for r in caplog.records
        if r.name == FAULT_LOGGER
        and r.levelno == logging.WARNING
        and r.getMessage().startswith(f"broker fault {rule}: ")
    ]


def test_aedes_qos2_delivery_to_a_qos1_subscription_is_stored_and_reported(
    aedes: ExternalBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aedes 1.2.0 delivers a QoS 2 publish at QoS 2 to a wildcard subscription granted QoS 1
    (section 3.8.4: at most the granted QoS). The receiver stores every message (acknowledged
    at QoS 2, as it came), counts each delivery as broker fault `qos-above-granted`, and logs
    the fault once per connection."""
    count = 20
    broker = InteropBroker("aedes", aedes)
    publisher = publisher_to(broker)
    run = make_run(broker, tmp_path, 1, "granted")  # subscribes x/# at QoS 1
    caplog.set_level(logging.WARNING, logger=FAULT_LOGGER)
    try:
        receiver = run.start()
        publisher.send_all(Message("x/q", p, 2) for p in numbered(count))
        publisher.wait_acknowledged()
        run.settle(receiver, count)
        run.stop(receiver)
    finally:
        run.close()
        publisher.disconnect()
    payloads = run.payloads()
    summary = run.summary(count, payloads)
    assert payloads == numbered(count), summary
    assert receiver.stats.connections == 1, summary
    assert receiver.stats.broker_faults == {QOS_ABOVE_GRANTED: count}, summary
    assert receiver.stats.possible_duplicates == 0, summary
    assert len(fault_warnings(caplog, QOS_ABOVE_GRANTED)) == 1, caplog.text
    assert "delivered at QoS 2, above the QoS 1" in caplog.text, caplog.text
    sent = re.findall(r"sent PUBLISH client=interop-granted-q1 id=\d+ qos=(\d)", aedes.log_text())
    assert sent == ["2"] * count, "aedes was expected to deliver every message at QoS 2"


def test_aedes_qos_above_granted_is_logged_once_per_connection(
    aedes: ExternalBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same through a proxy that cuts the receiver's connection between two bursts of 20:
    one `broker fault qos-above-granted` line per connection (two), and every QoS 2 PUBLISH
    aedes sent counted. Every number is stored; a completed QoS 2 message aedes resends after
    the cut (`RESENDS_COMPLETED_QOS2`) is a stored row counted as a possible duplicate, or a
    resend withheld."""
    count = 20
    broker = InteropBroker("aedes", aedes)
    proxy = FaultProxy((aedes.host, aedes.port))
    publisher = publisher_to(broker)
    run = Run(broker, tmp_path / "wal", 1, "interop-granted-cut", url=proxy.url)
    caplog.set_level(logging.WARNING, logger=FAULT_LOGGER)
    try:
        receiver = run.start()
        publisher.send_all(Message("x/q", p, 2) for p in numbered(count))
        publisher.wait_acknowledged()
        run.settle(receiver, count)
        assert fault_warnings(caplog, QOS_ABOVE_GRANTED), caplog.text
        assert proxy.cut() == 1
        wait_until(
            lambda: receiver.stats.connections == 2,
            TIMEOUT,
            message=lambda: f"receiver reconnected {receiver.stats.connections - 1} times",
        )
        publisher.send_all(Message("x/q", str(n).encode(), 2) for n in range(count, 2 * count))
        publisher.wait_acknowledged()
        run.settle(receiver, 2 * count)
        run.stop(receiver)
    finally:
        run.close()
        publisher.disconnect()
        proxy.close()
    payloads = run.payloads()
    summary = run.summary(2 * count, payloads)
    sent = re.findall(r"sent PUBLISH client=interop-granted-cut id=\d+ qos=(\d)", aedes.log_text())
    assert set(sent) == {"2"}, "aedes was expected to deliver at QoS 2"
    assert missing_numbers(payloads, 2 * count) == [], summary
    assert len(payloads) - 2 * count == receiver.stats.possible_duplicates, summary
    assert receiver.stats.connections == 2, summary
    assert receiver.stats.broker_faults == {QOS_ABOVE_GRANTED: len(sent)}, summary
    assert len(sent) == len(payloads) + receiver.stats.duplicates_dropped, summary
    assert len(fault_warnings(caplog, QOS_ABOVE_GRANTED)) == 2, caplog.text
