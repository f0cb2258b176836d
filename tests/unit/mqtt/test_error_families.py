"""Two error families say who broke a rule: the peer (``RemoteProtocolError``: bytes received, a
broker that keeps violating) or the caller (``LocalProtocolError``: an argument refused, a call the
session's state does not allow). Argument errors are ``ValueError`` too, and a topic is a
``MalformedPacket`` whichever side gave it, with the same message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from connector.mqtt.address import BrokerAddress
from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import (
    InvalidArgument,
    InvalidTopic,
    LocalProtocolError,
    MalformedFrame,
    MalformedPacket,
    MqttError,
    PacketTooLarge,
    RemoteProtocolError,
    RepeatedProtocolViolation,
)
from connector.mqtt.fields import encode_remaining_length
from connector.mqtt.packets import Connack, ProtocolLevel, Subscribe
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession
from connector.mqtt.topics import validate_topic_name


def connected() -> ClientSession:
    session = ClientSession(SessionConfig("c"))
    session.connect(0.0)
    session.receive_data(encode(Connack(False, 0)), 0.0)
    return session


def raised(call: Callable[[], object]) -> MqttError:
    with pytest.raises(MqttError) as info:
        call()
    return info.value


def peer_only(error: MqttError) -> None:
    assert isinstance(error, RemoteProtocolError) and not isinstance(error, LocalProtocolError), (
        error
    )


def caller_only(error: MqttError) -> None:
    assert isinstance(error, LocalProtocolError) and not isinstance(error, RemoteProtocolError), (
        error
    )


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00",
        b"\x36\x05\x00\x01a\x00\x01",
        b"\x30\x05\x00\x03a/#",
        b"\x82\x07\x00\x01\x00\x02a+\x00",
    ],
    ids=["reserved-type", "qos-3", "wildcard-topic", "bad-filter-in-subscribe"],
)
def test_bytes_from_the_peer_raise_a_peer_violation(data: bytes) -> None:
    decoder = ReceiveBuffer()
    error = raised(lambda: decoder.feed(data))
    assert isinstance(error, MalformedFrame) and isinstance(error, MalformedPacket)
    peer_only(error)
    peer_only(raised(lambda: decoder.feed(b"")))  # the stream already failed


def test_a_packet_above_the_limit_is_a_peer_violation() -> None:
    error = raised(lambda: ReceiveBuffer(max_packet_size=2).feed(b"\x30\x05"))
    assert isinstance(error, PacketTooLarge)
    peer_only(error)


def test_a_broker_that_keeps_violating_is_a_peer_violation() -> None:
    session = ClientSession(SessionConfig("c", max_violations_in_a_row=1))
    session.connect(0.0)
    error = raised(lambda: session.receive_data(b"\x00\x00", 0.0))
    assert isinstance(error, RepeatedProtocolViolation)
    peer_only(error)


def test_a_topic_is_checked_with_one_message_whichever_side_gave_it() -> None:
    """The caller's topic raises InvalidTopic; the same topic read from the peer raises
    MalformedFrame with the rule's message."""
    caller = raised(lambda: validate_topic_name("a/#"))
    assert isinstance(caller, InvalidTopic)
    caller_only(caller)
    assert isinstance(caller, ValueError) and isinstance(caller, MalformedPacket)
    peer = raised(lambda: ReceiveBuffer().feed(encode_publish(b"a/#", b"")))
    peer_only(peer)
    assert str(peer) == str(caller)
    caller_filter = raised(lambda: encode(Subscribe(1, [("a/#/b", 0)])))
    assert isinstance(caller_filter, InvalidTopic)
    read = raised(lambda: ReceiveBuffer().feed(b"\x82\x0a\x00\x01\x00\x05a/#/b\x00"))
    peer_only(read)
    assert str(read) == f"SUBSCRIBE/UNSUBSCRIBE: {caller_filter}"


@pytest.mark.parametrize(
    "call",
    [
        lambda: SessionConfig("c", keep_alive=70_000),
        lambda: SessionConfig("c", pubrec_window=-1),
        lambda: connected().publish("a", b"", 3, 1.0),
        lambda: connected().subscribe([], 1.0),
        lambda: connected().subscribe([("a/#/b", 0)], 1.0),
        lambda: connected().publish("a/+", b"", 1, 1.0),
        lambda: ClientSession(SessionConfig("c")).restore_qos2_pending([0]),
        lambda: BrokerAddress.parse("http://broker"),
        lambda: ProtocolLevel.parse("6"),
        lambda: ReceiveBuffer(max_packet_size=0),
        lambda: encode_remaining_length(-1),
        lambda: encode_publish("t", b"", 1, None),
    ],
    ids=[
        "keep-alive",
        "pubrec-window",
        "publish-qos",
        "subscribe-nothing",
        "subscribe-filter",
        "publish-topic",
        "restore-id",
        "broker-url",
        "mqtt-version",
        "max-packet-size",
        "remaining-length",
        "publish-id",
    ],
)
def test_arguments_the_api_refuses_are_caller_errors_and_value_errors(
    call: Callable[[], object],
) -> None:
    error = raised(call)
    assert isinstance(error, InvalidArgument) and isinstance(error, ValueError)
    caller_only(error)


@pytest.mark.parametrize("what", ["publish", "subscribe", "connect"])
def test_calls_the_session_state_does_not_allow_are_caller_errors(what: str) -> None:
    session = ClientSession(SessionConfig("c"))
    if what == "connect":
        session.connect(0.0)
        error = raised(lambda: session.connect(0.0))
    elif what == "publish":
        error = raised(lambda: session.publish("a", b"", 1, 0.0))
    else:
        error = raised(lambda: session.subscribe([("a", 1)], 0.0))
    assert isinstance(error, LocalProtocolError)
    caller_only(error)
