"""A broker resending more messages than there are packet ids, in order, after a lost connection.

A broker with more than 65,535 QoS 1 messages in flight for one session (Mosquitto 2.0.11)
reuses packet ids among them and, after a reconnect, resends its whole in-flight list with
DUP=1, oldest first. A scripted broker on loopback plays that with ids cycling over 1..100:
every resent message must be stored once and acknowledged, every never-received one stored.
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
from tests.hostile_broker import ScriptedBroker
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
