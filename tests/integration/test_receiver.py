"""The receiver (MQTT -> WAL -> ack) against real Mosquitto, without Spark."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.encode import encode_publish
from connector.mqtt.packets import Pubcomp, Pubrec
from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from connector.wal import RecordTuple, WalReader
from tests.integration.receiver_setup import options
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.hostile_broker import ScriptedBroker
from tests.support.publishing import publish_with_cli
from tests.support.waiting import wait_until


@pytest.mark.parametrize("qos", [1, 2])
def test_redeliveries_after_a_crash_before_the_ack(
    mosquitto: MosquittoBroker, tmp_path: Path, qos: int
) -> None:
    """A crash between the fsync and the acknowledgement. QoS 2: the stored ids are pending,
    so the broker's resends are answered and not stored again (section 4.3.3). QoS 1: a new
    process cannot prove its acknowledgements never left, so the resends are stored again
    (at least once) and counted as possible duplicates."""
    wal = tmp_path / "wal"
    first = Receiver(options(mosquitto, wal, qos))
    # Simulate a crash between fsync and acknowledgement: nothing is ever acknowledged.
    first.client.acknowledge = lambda *args, **kwargs: None  # type: ignore[method-assign]
    first.start()
    try:
        publish_with_cli(mosquitto, "r/a", qos, 10)
        wait_until(
            lambda: first.wal.next_offset == 10,
            15,
            message=lambda: f"WAL holds {first.wal.next_offset} of 10",
        )
    finally:
        first.stop()

    second = Receiver(options(mosquitto, wal, qos))
    second.start()
    try:
        if qos == 1:
            # Redelivered with DUP=1, each equal to the message stored with its id.
            wait_until(
                lambda: second.wal.next_offset == 20,
                15,
                message=lambda: f"WAL holds {second.wal.next_offset} of 20",
            )
            assert second.stats.possible_duplicates == 10
            assert second.stats.duplicates_dropped == 0
        else:
            # The ids restored from the WAL are pending: the session answers the redelivered
            # PUBLISHes with PUBREC without delivering them; the PUBRELs that follow are
            # persisted as releases.
            wait_until(
                lambda: not second.wal.qos2_pending,
                15,
                message=lambda: f"still pending: {sorted(second.wal.qos2_pending)}",
            )
        stored = 20 if qos == 1 else 10
        assert second.wal.next_offset == stored
        publish_with_cli(mosquitto, "r/b", qos, 5)
        wait_until(
            lambda: second.wal.next_offset == stored + 5,
            15,
            message=lambda: f"WAL holds {second.wal.next_offset} of {stored + 5}",
        )
    finally:
        second.stop()
    columns = WalReader(wal).read(0, stored + 5)
    assert columns.topics == ["r/a"] * stored + ["r/b"] * 5
    assert len(set(columns.payloads[:stored])) == 10
    assert columns.dup[10:stored] == [True] * (stored - 10), "the resends have DUP=1"


def test_backpressure_stops_reading_until_spark_commits(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    receiver = Receiver(options(mosquitto, tmp_path / "wal", 1, maxBacklogMessages="50"))
    receiver.start()
    try:
        publish_with_cli(mosquitto, "r/bp", 1, 400)
        wait_until(lambda: receiver.wal.next_offset >= 50, 15)
        # Paused: at most the 20 unacknowledged messages the broker may send beyond the bound.
        receiver.wait_idle(0.5, timeout=10)
        paused_at = receiver.wal.next_offset
        assert 50 <= paused_at < 400, paused_at
        receiver.committed_to(paused_at)
        wait_until(lambda: receiver.wal.next_offset == 400 or receiver._backlogged(), 15)
        while receiver.wal.next_offset < 400:
            receiver.committed_to(receiver.wal.next_offset)
            wait_until(lambda: receiver.wal.next_offset == 400 or receiver._backlogged(), 15)
    finally:
        receiver.stop()
    assert receiver.stats.appended == 400
    assert receiver.error is None


def test_a_slow_append_does_not_end_the_wait_for_the_first_burst(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """``wait_idle`` counts the quiet time from the end of the last stored read: an append
    slower than the idle time (a slow disk) is not taken for the end of the broker's queue."""
    opts = options(mosquitto, tmp_path / "wal", 1, clientId="receiver-test-slow-append")
    session = Receiver(opts)  # the persistent session that the broker queues for
    session.start()
    session.stop()
    publish_with_cli(mosquitto, "r/slow", 1, 200)

    receiver = Receiver(opts)
    append = receiver.wal.append
    entered = threading.Event()

    def slow_first_append(
        records: Sequence[RecordTuple], *, released_qos2: Iterable[int] = ()
    ) -> int:
        if records and not entered.is_set():
            entered.set()
            time.sleep(0.5)  # the disk stalls on the first read's append
        return append(records, released_qos2=released_qos2)

    receiver.wal.append = slow_first_append  # type: ignore[method-assign]
    receiver.start()
    try:
        assert entered.wait(15), "no message arrived"
        receiver.wait_idle(0.1, timeout=30)
        assert receiver.wal.next_offset == 200
    finally:
        receiver.stop()
    assert receiver.error is None


def test_a_qos2_resend_after_a_completed_exchange_is_stored_and_counted(tmp_path: Path) -> None:
    """After PUBCOMP the id is free (section 4.3.3): a PUBLISH with it is a new message, even
    with DUP=1 and the same topic and payload as the one completed (a broker that lost our
    PUBCOMP looks the same as one that repeats a payload). It is stored and counted as a
    possible duplicate; DUP=1 with another payload is new and not counted."""
    pubrel = bytes.fromhex("62 02 00 07")

    def exchanges(conn: socket.socket, number: int) -> None:
        def count(kind: type, pid: int) -> int:
            return sum(1 for p in broker.received.get(number, []) if p == kind(pid))

        def run() -> None:
            for i, frame in enumerate(
                [
                    encode_publish("r/q2", b"one", 2, 7),
                    encode_publish("r/q2", b"one", 2, 7, dup=True),  # resend of a completed one
                    encode_publish("r/q2", b"two", 2, 7, dup=True),  # a new message
                ],
                start=1,
            ):
                conn.sendall(frame)

                def pubrecs(i: int = i) -> bool:
                    return count(Pubrec, 7) >= i

                def pubcomps(i: int = i) -> bool:
                    return count(Pubcomp, 7) >= i

                wait_until(pubrecs, 20)
                conn.sendall(pubrel)
                wait_until(pubcomps, 20)

        threading.Thread(target=run, daemon=True).start()

    with ScriptedBroker(exchanges) as broker:
        raw = {"brokerUrl": broker.url, "topic": "r/#", "qos": "2", "walPath": str(tmp_path)}
        receiver = Receiver(SourceOptions.parse({**raw, "clientId": "resend-q2"}))
        receiver.start()
        try:
            wait_until(lambda: sum(1 for p in broker.received[1] if p == Pubcomp(7)) == 3, 20)
            end = receiver.wal.next_offset
        finally:
            receiver.stop()
    assert end == 3
    stored = WalReader(str(tmp_path)).read(0, end)
    assert [bytes(p) for p in stored.payloads] == [b"one", b"one", b"two"]
    assert receiver.stats.duplicates_dropped == 0
    assert receiver.stats.possible_duplicates == 1
    assert broker.connections == 1, "a resend is not a protocol violation"


def test_a_qos2_backlog_sent_all_at_once_is_acknowledged_through_the_pubrec_window(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """A broker without an inflight limit sends a whole QoS 2 backlog at once: the receiver
    stores every message once and answers them in windows, and every exchange completes."""
    broker = broker_factory(max_inflight_messages=0)
    client_id = "receiver-test-window"
    offline = MqttClient(broker.url, SessionConfig(client_id), [("r/#", 2)])
    assert not offline.connect().session_present
    offline.disconnect()
    count = 1_000
    publish_with_cli(broker, "r/w", 2, count)

    receiver = Receiver(options(broker, tmp_path / "wal", 2, clientId=client_id))
    receiver.start()
    try:
        wait_until(
            lambda: receiver.wal.next_offset == count and not receiver.wal.qos2_pending,
            30,
            message=lambda: (
                f"WAL holds {receiver.wal.next_offset} of {count}; "
                f"{len(receiver.wal.qos2_pending)} exchanges open"
            ),
        )
        held = receiver.client.session.pubrecs_held
    finally:
        receiver.stop()
    window = receiver.client.session.config.pubrec_window
    # The broker sent them all: most PUBRECs waited for room. A read that brings releases and
    # new messages completes first (PUBCOMPs before PUBRECs), so the room it frees can take
    # new messages' PUBRECs at once: up to a window more of them never wait.
    assert held >= count - 2 * window
    assert receiver.stats.release_reads_gathered, "reads of releases waited for more"
    assert receiver.stats.appended == count
    assert receiver.error is None
    assert len(set(WalReader(tmp_path / "wal").read(0, count).payloads)) == count
