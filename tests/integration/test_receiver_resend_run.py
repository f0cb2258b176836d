"""A broker resending more messages than there are packet ids, in order, after a lost connection.

A broker with more than 65,535 QoS 1 messages in flight for one session (Mosquitto 2.0.11)
reuses packet ids among them and, after a reconnect, resends its whole in-flight list with
DUP=1, oldest first. A scripted broker on loopback plays that with ids cycling over 1..100:
every resent message must be stored once and acknowledged, every never-received one stored.
Then a real Mosquitto without an inflight limit does it with 70,000 messages.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from connector.mqtt.codec import encode, encode_publish
from connector.mqtt.packets import Connack, Puback
from connector.source.options import SourceOptions
from connector.source.receiver import Receiver
from connector.wal import WalReader
from tests.brokers import BrokerFactory
from tests.hostile_broker import ScriptedBroker
from tests.integration.test_receiver import options, publish
from tests.waiting import wait_until

TOPIC = "r/run"
IDS = 100
FIRST = 300  # delivered on connection 1, ids 1..100 three times over
WINDOW = 100  # connection 1 sends this many, then waits for their PUBACKs
RESENT_FROM = 150  # connection 2 resends messages 150..299 with DUP=1 ...
NEVER_RECEIVED = 12  # ... then 300..311, which the first connection lost before delivery


def packet_id(n: int) -> int:
    return n % IDS + 1


def payload(n: int) -> bytes:
    return b"message %04d" % n


def test_an_in_order_resend_with_reused_packet_ids_is_stored_once(tmp_path: Path) -> None:
    stop = threading.Event()

    def pubacks(number: int) -> list[int]:
        return [p.packet_id for p in list(broker.received.get(number, [])) if type(p) is Puback]

    def first_connection(conn: socket.socket, number: int) -> None:
        if number != 1:
            return

        def run() -> None:
            for lo in range(0, FIRST, WINDOW):
                conn.sendall(
                    b"".join(
                        encode_publish(TOPIC, payload(n), 1, packet_id(n))
                        for n in range(lo, lo + WINDOW)
                    )
                )
                # An id is reused only once its PUBACK came (as a broker does on one connection).
                wait_until(lambda lo=lo: len(pubacks(1)) >= lo + WINDOW, 30)
            conn.shutdown(socket.SHUT_RDWR)  # the connection is lost

        threading.Thread(target=run, daemon=True).start()

    def connack(conn: socket.socket, number: int) -> None:
        data = encode(Connack(number > 1, 0))
        if number == 2 and not stop.is_set():
            # CONNACK and the whole resend in one write (about 3.5 kB): the receiver reads
            # them in one go, so the run found by the WAL search is confirmed by the resends
            # after its start in the same read.
            resend = range(RESENT_FROM, FIRST + NEVER_RECEIVED)
            data += b"".join(
                encode_publish(TOPIC, payload(n), 1, packet_id(n), dup=True) for n in resend
            )
        conn.sendall(data)

    with ScriptedBroker(first_connection, on_connect=connack) as broker:
        raw = {
            "brokerUrl": broker.url,
            "topic": "r/#",
            "qos": "1",
            "walPath": str(tmp_path / "wal"),
            "clientId": "resend-run",
        }
        receiver = Receiver(SourceOptions.parse(raw))
        receiver.start()
        resent = FIRST + NEVER_RECEIVED - RESENT_FROM
        try:
            wait_until(
                lambda: len(pubacks(2)) == resent,
                30,
                message=lambda: (
                    f"{len(pubacks(2))} of {resent} resends acknowledged, "
                    f"{len(pubacks(1))} of {FIRST} first deliveries"
                ),
            )
            end = receiver.wal.next_offset
        finally:
            stop.set()
            receiver.stop()

    assert broker.connections == 2
    assert pubacks(1) == [packet_id(n) for n in range(FIRST)]
    # Every resend was acknowledged, in the order sent (shared ids included).
    assert pubacks(2) == [packet_id(n) for n in range(RESENT_FROM, FIRST + NEVER_RECEIVED)]
    stored = WalReader(str(tmp_path / "wal")).read(0, end)
    assert [bytes(p) for p in stored.payloads] == [
        payload(n) for n in range(FIRST + NEVER_RECEIVED)
    ], "each message exactly once, in the broker's order"
    assert stored.duplicate == [False] * FIRST + [True] * NEVER_RECEIVED
    assert receiver.stats.duplicates_dropped == FIRST - RESENT_FROM
    assert receiver.stats.appended == FIRST + NEVER_RECEIVED
    assert receiver.stats.connections == 2
    # One search found the run's start and the resends after it confirmed it.
    assert (receiver.resends.searches, receiver.resends.rejected) == (1, 0)


REAL_BACKLOG = 70_000
"""More than the 65,535 packet ids: messages 65,535 and later reuse the ids of the first ones."""


def test_mosquitto_resending_more_messages_than_packet_ids_gets_each_stored_once(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """Mosquitto with ``max_inflight_messages 0`` sends a persistent session's whole queue at
    once, numbering it with reused packet ids. The first connection stores every message and
    loses every PUBACK (a crash between the fsync and the acknowledgement); on the next one the
    broker resends all of them with DUP=1, oldest first. None may be stored again: the oldest
    resends carry ids that later stored messages reused, so only the in-order match against
    the WAL (one search, then the run) tells them apart from new messages."""
    broker = broker_factory(max_inflight_messages=0)
    wal = tmp_path / "wal"
    client_id = "resend-run-mosquitto"
    setup = Receiver(options(broker, wal, 1, clientId=client_id))
    setup.start()  # creates the persistent session and its subscription
    setup.stop()
    publish(broker, "r/a", 1, REAL_BACKLOG)

    first = Receiver(options(broker, wal, 1, clientId=client_id))
    first.client.acknowledge = lambda *args, **kwargs: None  # type: ignore[method-assign]
    first.start()
    try:
        wait_until(
            lambda: first.wal.next_offset == REAL_BACKLOG,
            60,
            message=lambda: f"connection 1 stored {first.wal.next_offset} of {REAL_BACKLOG}",
        )
    finally:
        first.stop()

    second = Receiver(options(broker, wal, 1, clientId=client_id))
    second.start()
    try:
        wait_until(
            lambda: second.stats.duplicates_dropped + second.stats.appended >= REAL_BACKLOG,
            60,
            message=lambda: (
                f"connection 2: {second.stats.duplicates_dropped} resends dropped, "
                f"{second.stats.appended} stored, of {REAL_BACKLOG}"
            ),
        )
    finally:
        second.stop()
    assert second.error is None
    assert (second.stats.appended, second.stats.duplicates_dropped) == (0, REAL_BACKLOG)
    # The first resend's id was reused by message 65,535: the latest-digest test missed it,
    # one search found it, and the run matched every resend from there.
    assert (second.resends.searches, second.resends.rejected) == (1, 0)
    assert second.resends.matched == REAL_BACKLOG

    # The broker got every PUBACK of connection 2: a third connection is resent nothing, and a
    # message published now is the next (and only new) one stored.
    third = Receiver(options(broker, wal, 1, clientId=client_id))
    third.start()
    try:
        publish(broker, "r/a", 1, 1, size=30)
        wait_until(
            lambda: third.stats.appended + third.stats.duplicates_dropped >= 1,
            30,
            message=lambda: "the message published after the drain did not arrive",
        )
    finally:
        third.stop()
    assert (third.stats.appended, third.stats.duplicates_dropped) == (1, 0)
    stored = WalReader(str(wal)).read(0, REAL_BACKLOG + 1)
    assert len(stored) == REAL_BACKLOG + 1
    numbers = [int(bytes(p)[:10]) for p in stored.payloads]
    assert numbers[:REAL_BACKLOG] == list(range(REAL_BACKLOG)), "each message once, in order"
    assert len(bytes(stored.payloads[-1])) == 30
