"""A scripted hostile broker (tests/support/hostile_broker.py, on our own codec) against
``MqttClient``.

On every violation the client logs the broker and the rule broken (with its spec section),
drops the connection without acknowledging anything of the bad read, reconnects, and receives
what the broker redelivers: nothing acknowledged is lost, nothing raises an untyped exception,
no call blocks past its deadline. A broker that keeps violating with no message delivered in
between is given up on with :class:`RepeatedProtocolViolation` naming the broker and the rule.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient, ReconnectPolicy
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import RepeatedProtocolViolation
from connector.mqtt.packets import (
    Connect,
    Pingreq,
    Puback,
    Pubcomp,
    Pubrec,
    Subscribe,
    Unsubscribe,
)
from tests.support.hostile_broker import CONNACK, ScriptedBroker, send_connack, trickle
from tests.support.waiting import wait_until

MAX_PACKET = 1 << 20
"""The largest Remaining Length the client takes: a whole packet of 1 + 3 + 2^20 bytes."""
CONNECT_TIMEOUT = 2.0
POLL = 0.2
POLL_BOUND = POLL + CONNECT_TIMEOUT + 1.0
"""No poll() may take longer: one read plus at most one reconnect attempt."""
DEADLINE = 20.0

BEFORE = encode_publish("a/first", b"before", 1, 5)
BEFORE_DUP = encode_publish("a/first", b"before", 1, 5, dup=True)
GOOD = encode_publish("a/good", b"after", 1, 6)


def h(text: str) -> bytes:
    return bytes.fromhex(text)


@dataclass(frozen=True)
class Case:
    """Connection 1 sends BEFORE + ``bad`` after SUBACK; later ones ``redeliver`` + GOOD."""

    bad: bytes
    rule: str
    section: str | None
    redeliver: bytes = BEFORE_DUP
    expected: frozenset[tuple[str, bytes]] = field(
        default_factory=lambda: frozenset({("a/first", b"before")})
    )
    on_connect_1: object = None


def q2(payload: bytes, pid: int, dup: bool = False) -> bytes:
    return encode_publish("a/q2", payload, 2, pid, dup=dup)


def connack_then_garbage(conn: socket.socket, number: int) -> None:
    conn.sendall(CONNACK + h("00 00") if number == 1 else CONNACK)


def trickled_connack(conn: socket.socket, number: int) -> None:
    if number == 1:  # 4 bytes over 3.2 s: longer than the client's connect timeout
        trickle(conn, CONNACK, CONNECT_TIMEOUT * 0.4)
    else:
        send_connack(conn, number)


CASES = {
    # malformed frames
    "publish-qos3": Case(h("36 05 00 01 61 00 01"), "QoS 3", "3.3.1.2"),
    "packet-id-0": Case(h("32 05 00 01 61 00 00"), "packet identifier 0", "2.3.1"),
    "invalid-utf8-topic": Case(h("30 04 00 02 C3 28"), "UTF-8", "1.5.3"),
    "nul-in-topic": Case(h("30 04 00 02 61 00"), "U+0000", "1.5.3"),
    "wildcard-topic": Case(h("30 05 00 03 61 2F 23"), "wildcard", "3.3.2.1"),
    "dup-on-qos0": Case(h("38 03 00 01 61"), "DUP must be 0", "3.3.1.1"),
    "truncated-field": Case(h("30 01 00"), "past the end", "3.3.2"),
    "reserved-type": Case(h("F0 00"), "reserved", "2.2.1"),
    "suback-bad-code": Case(h("90 03 00 01 07"), "return code", "3.9.3"),
    "stray-suback": Case(h("90 03 00 09 00"), "SUBACK for packet id 9", "3.9.2"),
    # lengths
    "length-5-bytes": Case(h("30 FF FF FF FF 01"), "more than 4 bytes", "2.2.3"),
    "never-ending-length": Case(b"\x30" + b"\xff" * 64, "more than 4 bytes", "2.2.3"),
    "oversized": Case(h("30 80 80 80 01"), f"exceeds the maximum of {MAX_PACKET}", None),
    # wrong fixed-header flags
    "puback-flags": Case(h("41 02 00 05"), "flags", "2.2.2"),
    "pubrel-flags": Case(h("60 02 00 05"), "flags", "2.2.2"),
    "pingresp-flags": Case(h("D2 00"), "flags", "2.2.2"),
    # packets a broker never sends, or not now
    "connect": Case(encode(Connect("x", clean_session=True)), "CONNECT", "2.2.1"),
    "subscribe": Case(encode(Subscribe(1, [("a", 0)])), "SUBSCRIBE", "2.2.1"),
    "unsubscribe": Case(encode(Unsubscribe(1, ["a"])), "UNSUBSCRIBE", "2.2.1"),
    "pingreq": Case(encode(Pingreq()), "PINGREQ", "2.2.1"),
    "second-connack": Case(CONNACK, "second CONNACK", "3.2"),
    "garbage-after-connack": Case(
        b"", "packet type 0 is reserved", "2.2.1", on_connect_1=connack_then_garbage
    ),
    # packet identifiers
    "qos2-id-reuse": Case(
        q2(b"one", 9) + q2(b"two", 9),
        "reuses packet id 9",
        "2.3.1",
        redeliver=BEFORE_DUP + q2(b"one", 9, dup=True) + q2(b"two", 10),
        expected=frozenset({("a/first", b"before"), ("a/q2", b"one"), ("a/q2", b"two")}),
    ),
    "qos1-id-reuse": Case(
        encode_publish("a/first", b"other", 1, 5),
        "reuses packet id 5",
        "2.3.1",
        redeliver=BEFORE_DUP + encode_publish("a/first", b"other", 1, 11),
        expected=frozenset({("a/first", b"before"), ("a/first", b"other")}),
    ),
    # a broker that goes away mid-frame, or answers too slowly
    "truncated-frame-then-close": Case(GOOD[:5], "closed the connection", None),
    "trickled-connack": Case(
        b"", "did not answer with CONNACK", None, on_connect_1=trickled_connack
    ),
}


def make_client(broker: ScriptedBroker, client_id: str, **config: object) -> MqttClient:
    return MqttClient(
        broker.url,
        SessionConfig(
            client_id,
            clean_session=True,
            keep_alive=30,
            maximum_packet_size=1 + 3 + MAX_PACKET,
            **config,  # type: ignore[arg-type]
        ),
        [("a/#", 2)],
        connect_timeout=CONNECT_TIMEOUT,
        reconnect=ReconnectPolicy(initial=0.01, maximum=0.05),
    )


class Receiver:
    """Polls like the Spark receiver: every poll bounded in time, every message acknowledged."""

    def __init__(self, client: MqttClient) -> None:
        self.client = client
        self.received: set[tuple[str, bytes]] = set()
        self.longest_poll = 0.0

    def poll(self) -> None:
        started = time.monotonic()
        read = self.client.poll(POLL)
        self.longest_poll = max(self.longest_poll, time.monotonic() - started)
        self.received.update((m.topic, m.payload) for m in read.messages)
        self.client.acknowledge(read.messages, read.released)

    def poll_until(self, condition: Callable[[], bool]) -> None:
        """Poll until ``condition()`` holds, within ``DEADLINE``."""

        def polled() -> bool:
            self.poll()
            return condition()

        wait_until(
            polled,
            DEADLINE,
            interval=0,
            message=lambda: f"received only {self.received}",
        )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_violation_is_logged_dropped_and_nothing_is_lost(
    case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    def script(conn: socket.socket, number: int) -> None:
        if number == 1:
            conn.sendall(BEFORE + case.bad)
            if case.rule == "closed the connection":
                conn.shutdown(socket.SHUT_RDWR)
        else:
            conn.sendall(case.redeliver + GOOD)

    on_connect = case.on_connect_1 or send_connack
    with ScriptedBroker(script, on_connect) as broker:  # type: ignore[arg-type]
        client = make_client(broker, "hostile-client")
        receiver = Receiver(client)
        try:
            with caplog.at_level(logging.WARNING, logger="connector.mqtt"):
                receiver.poll_until(lambda: ("a/good", b"after") in receiver.received)
        finally:
            client.disconnect()
    assert broker.connections >= 2, "the client must reconnect after the violation"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    logged = [text for text in warnings if case.rule in text and broker.url in text]
    assert logged, warnings
    if case.section is not None:
        assert any(f"section {case.section}" in text for text in logged), logged
    assert case.expected <= receiver.received, receiver.received
    if case.rule != "closed the connection":
        # Nothing of the read with the violation was acknowledged: the broker still owns it.
        acks = (Puback, Pubrec, Pubcomp)
        assert not [p for p in broker.received.get(1, []) if isinstance(p, acks)]
    assert receiver.longest_poll < POLL_BOUND, receiver.longest_poll


def test_pubrel_for_an_unknown_id_is_completed_on_the_same_connection() -> None:
    def script(conn: socket.socket, number: int) -> None:
        conn.sendall(BEFORE + h("62 02 00 2A") + GOOD)

    with ScriptedBroker(script) as broker:
        client = make_client(broker, "pubrel-client")
        receiver = Receiver(client)
        try:
            receiver.poll_until(lambda: ("a/good", b"after") in receiver.received)
            wait_until(lambda: Pubcomp(42) in broker.received.get(1, []), DEADLINE)
        finally:
            client.disconnect()
    assert broker.connections == 1
    assert {("a/first", b"before"), ("a/good", b"after")} <= receiver.received


def test_a_slow_trickle_delivers_without_blocking_any_poll() -> None:
    def script(conn: socket.socket, number: int) -> None:
        trickle(conn, BEFORE + GOOD, 0.03)

    with ScriptedBroker(script) as broker:
        client = make_client(broker, "trickle-client")
        receiver = Receiver(client)
        try:
            receiver.poll_until(lambda: ("a/good", b"after") in receiver.received)
        finally:
            client.disconnect()
    assert broker.connections == 1
    assert ("a/first", b"before") in receiver.received
    assert receiver.longest_poll < POLL + 1.0, receiver.longest_poll


def test_a_frame_that_never_completes_leaves_poll_and_disconnect_bounded() -> None:
    stop: list[bool] = []

    def script(conn: socket.socket, number: int) -> None:
        conn.sendall(BEFORE + h("30 64 00 01 61"))  # 100 bytes announced, 3 sent
        while not stop:  # then one byte every 50 ms, for as long as the client listens
            try:
                conn.sendall(b"x")
            except OSError:
                return
            time.sleep(0.05)

    with ScriptedBroker(script) as broker:
        client = make_client(broker, "stall-client")
        receiver = Receiver(client)
        try:
            receiver.poll_until(lambda: bool(receiver.received))
            for _ in range(10):
                receiver.poll()
        finally:
            started = time.monotonic()
            client.disconnect()
            disconnect_took = time.monotonic() - started
            stop.append(True)
    assert receiver.received == {("a/first", b"before")}
    assert client.session.state.value in ("closed", "disconnected")
    assert receiver.longest_poll < POLL + 1.0, receiver.longest_poll
    assert disconnect_took < 1.0, disconnect_took


@pytest.mark.parametrize("where", ["after-suback", "with-connack"])
def test_a_broker_that_keeps_violating_is_given_up_on(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    def script(conn: socket.socket, number: int) -> None:
        conn.sendall(BEFORE + h("F0 00"))

    def on_connect(conn: socket.socket, number: int) -> None:
        conn.sendall(CONNACK + h("F0 00"))

    with ScriptedBroker(script, on_connect if where == "with-connack" else send_connack) as broker:
        client = make_client(broker, "repeat-client", max_violations_in_a_row=3)
        receiver = Receiver(client)
        deadline = time.monotonic() + DEADLINE
        with (
            caplog.at_level(logging.WARNING, logger="connector.mqtt"),
            pytest.raises(RepeatedProtocolViolation) as gave_up,
        ):
            while time.monotonic() < deadline:
                receiver.poll()
        client.close()
    error = gave_up.value
    assert error.broker == broker.url and error.count == 3
    assert str(error).startswith(f"{broker.url} broke the MQTT protocol 3 times in a row")
    assert "packet type 15 is reserved (section 2.2.1)" in str(error)
    assert broker.connections == 3
    assert any("giving up on " + broker.url in r.getMessage() for r in caplog.records)
    assert not [p for packets in broker.received.values() for p in packets if isinstance(p, Puback)]
    assert receiver.received == set()
    assert receiver.longest_poll < POLL_BOUND, receiver.longest_poll


def test_one_message_between_violations_keeps_the_client_going() -> None:
    def script(conn: socket.socket, number: int) -> None:
        # Every connection delivers one new message, waits for its PUBACK (so the message was
        # a read of its own), then breaks the rules.
        conn.sendall(encode_publish("a/n", str(number).encode(), 1, 1))
        seen = b""
        conn.settimeout(DEADLINE)
        while encode(Puback(1)) not in seen:
            data = conn.recv(65536)
            if not data:
                return
            seen += data
        conn.sendall(h("F0 00"))

    with ScriptedBroker(script) as broker:
        client = make_client(broker, "progress-client", max_violations_in_a_row=2)
        receiver = Receiver(client)
        try:
            receiver.poll_until(lambda: len(receiver.received) >= 4)
        finally:
            client.disconnect()
    assert broker.connections >= 4
    assert {("a/n", str(n).encode()) for n in range(1, 5)} <= receiver.received
