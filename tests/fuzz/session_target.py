"""Fuzz target: the client session state machine on arbitrary bytes from a broker.

Input layout: byte 0 picks the protocol level (bit 0), whether CONNACK was already received
(bit 1), whether the session acknowledges what it receives (bit 2) and the read size (bits
3-7); the rest is what the broker sends.

Invariants: only :class:`MqttError` subclasses are raised, never a caller's error
(:class:`LocalProtocolError`: the broker's bytes cannot make the caller's calls wrong); a
:class:`ProtocolViolation` is the last event of its read, cites a spec section and closes the
session; the bytes the session queues for the broker always decode as well-formed packets.
"""

from __future__ import annotations

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import ConnectionRefused, LocalProtocolError, MqttError
from connector.mqtt.events import ProtocolViolation
from connector.mqtt.packets import Connack, ProtocolLevel, Publish, Pubrel, Suback
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession, State

from .decoder_target import cites_rule


def one_input(data: bytes) -> None:
    if not data:
        return
    control, stream = data[0], data[1:]
    level = ProtocolLevel.MQTT_3_1 if control & 1 else ProtocolLevel.MQTT_3_1_1
    session = ClientSession(SessionConfig("fuzz", level=level, keep_alive=10))
    session.restore_qos2_pending({1, 2})
    session.connect(0.0)
    if control & 2:
        session.receive_data(encode(Connack(True, 0)), 0.0)
        session.subscribe([("a/#", 2)], 0.0)
    outbound = ReceiveBuffer(level)  # what the session sends must always be well-formed
    outbound.feed(session.data_to_send())
    step = (control >> 3) + 1
    now = 0.0
    for pos in range(0, len(stream), step):
        now += 0.5
        try:
            events = session.receive_data(stream[pos : pos + step], now)
            session.tick(now)
        except ConnectionRefused:
            return
        except MqttError as exc:
            assert str(exc), exc
            assert not isinstance(exc, LocalProtocolError), exc
            return
        for index, event in enumerate(events):
            if isinstance(event, ProtocolViolation):
                assert index == len(events) - 1, events
                assert cites_rule(event.reason), event.reason
                assert session.state is State.CLOSED
            elif control & 4 and isinstance(event, Publish):
                session.ack(event, now)
        outbound.feed(session.data_to_send())
        if session.state is State.CLOSED:
            return


def seeds() -> list[bytes]:
    connack = encode(Connack(False, 0))
    flows = [
        connack,
        connack + encode(Suback(1, [2])) + encode_publish("a/b", b"m", 2, 1, dup=True),
        encode_publish("a/b", b"m", 2, 5) + encode(Pubrel(5)) + encode(Pubrel(1)),
        encode_publish("a/b", b"one", 1, 3) + encode_publish("a/c", b"two", 1, 3),
        encode_publish("a/b", b"one", 2, 3) + encode_publish("a/b", b"two", 2, 3),
        encode(Suback(9, [0])),
        bytes.fromhex("20 02 00 05"),
        bytes.fromhex("F0 00"),
    ]
    return [bytes([c]) + f for f in flows for c in (0x00, 0x02, 0x06, 0x0F, 0xFF)]
