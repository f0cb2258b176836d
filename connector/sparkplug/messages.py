"""A run of stored MQTT messages read as Sparkplug: each message's topic and payload decoded,
the state folded in order (:mod:`.state`), and the rows of each (:mod:`.rows`).

:func:`decode_messages` makes the rows of a range of messages from the state before it and
leaves the state after it; :func:`fold` only advances the state (what the planner of a batch
needs for the ranges before the ones it hands out): it reads a DATA message's sequence number
without decoding its metrics, and decodes only the births. Both give the same state.

A message on a topic outside the Sparkplug namespace, or whose payload does not decode, still
gets a row: its ``reason`` says why and ``payload`` keeps its bytes (the ingest job sends those
rows to its dead-letter table). STATE payloads are JSON (``{"online": true, "timestamp": ...}``,
Sparkplug 3.0) or the text ``ONLINE``/``OFFLINE`` (before 3.0).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .payload import (
    DEFAULT_DECOMPRESSED_LIMIT,
    Payload,
    PayloadError,
    decode_message,
    read_message,
)
from .rows import Rows
from .state import SparkplugState
from .topics import MessageType, SparkplugTopic, TopicError, parse_topic
from .wire import VARINT, WireError, fields


@dataclass(frozen=True, slots=True)
class Message:
    """One stored MQTT message, as the WAL holds it."""

    topic: str
    payload: bytes
    qos: int
    timestamp_us: int
    offset: int


def decode_messages(
    messages: Iterable[Message],
    state: SparkplugState,
    receiver: int = 0,
    limit: int = DEFAULT_DECOMPRESSED_LIMIT,
) -> Rows:
    """The rows of ``messages``, in order; ``state`` is the state before the first and is
    left as the state after the last."""
    rows = Rows()
    topics: dict[str, SparkplugTopic | str] = {}  # a topic parsed once: the topic, or why not
    for message in messages:
        mqtt = {
            "topic": message.topic,
            "qos": message.qos,
            "timestamp": message.timestamp_us,
            "offset": message.offset,
            "receiver": receiver,
        }
        topic = topics.get(message.topic)
        if topic is None:
            try:
                topic = topics[message.topic] = parse_topic(message.topic)
            except TopicError as exc:
                topic = topics[message.topic] = str(exc)
        if isinstance(topic, str):
            rows.add(mqtt, None, None, None, reason=topic, raw=message.payload)
            continue
        if topic.message_type is MessageType.STATE:
            online, problem = state_payload(message.payload)
            rows.add(
                mqtt, topic, None, None, reason=problem, raw=message.payload, host_online=online
            )
            continue
        try:
            read = read_message(message.payload, limit)
        except PayloadError as exc:
            # The state takes what ``fold`` would: a DATA message's readable seq, no birth.
            state.apply(topic, _state_input(topic, message.payload, limit), message.timestamp_us)
            rows.add(mqtt, topic, None, None, reason=str(exc), raw=message.payload)
            continue
        context = state.apply(topic, read.payload, message.timestamp_us)
        rows.add(
            mqtt,
            topic,
            read.payload,
            context,
            plain=read.plain,
            properties=read.properties,
            flags=read.flags,
        )
    return rows


def fold(
    messages: Iterable[Message], state: SparkplugState, limit: int = DEFAULT_DECOMPRESSED_LIMIT
) -> None:
    """Advance ``state`` over ``messages`` as :func:`decode_messages` would, building no
    rows: births, deaths and compressed payloads are decoded, other messages read only for
    their sequence number."""
    for message in messages:
        try:
            topic = parse_topic(message.topic)
        except TopicError:
            continue
        if topic.message_type is MessageType.STATE:
            continue
        state.apply(topic, _state_input(topic, message.payload, limit), message.timestamp_us)


def _state_input(topic: SparkplugTopic, data: bytes, limit: int) -> Payload | None:
    """What the state needs of a message: a birth or death decoded whole, any other message's
    sequence number alone; None when that much does not decode."""
    kind = topic.message_type
    try:
        if kind.birth or kind.death:
            return decode_message(data, limit)
        return _seq_only(data, limit)
    except PayloadError:
        return None


def _seq_only(data: bytes, limit: int) -> Payload:
    """The payload's ``seq`` (field 3) and ``uuid`` without its metrics; a compressed payload
    is decoded whole. PayloadError as :func:`decode_message` would raise it."""
    seq = None
    try:
        for number, wire, value in fields(data):
            if number == 3 and wire == VARINT and isinstance(value, int):
                seq = value
            elif number == 4:  # uuid: maybe a compressed payload
                return decode_message(data, limit)
    except WireError as exc:
        raise PayloadError(f"not a Sparkplug B payload: {exc}") from None
    return Payload() if seq is None else Payload(seq=seq)


def state_payload(data: bytes) -> tuple[bool | None, str | None]:
    """A host's STATE payload: whether it says online, and what is wrong with it."""
    text = data.decode("utf-8", errors="replace").strip()
    if text in ("ONLINE", "OFFLINE"):  # before Sparkplug 3.0
        return text == "ONLINE", None
    try:
        value = json.loads(text)
    except ValueError:
        return None, "a STATE payload that is neither JSON nor ONLINE/OFFLINE"
    if not isinstance(value, dict) or not isinstance(value.get("online"), bool):
        return None, 'a STATE payload without a boolean "online"'
    return bool(value["online"]), None


def messages_of(
    topics: Sequence[str],
    payloads: Sequence[bytes],
    qos: Sequence[int],
    timestamps_us: Sequence[int],
    first_offset: int,
) -> list[Message]:
    """Messages from WAL columns (offsets consecutive from ``first_offset``)."""
    return [
        Message(topic, bytes(payload), q, stamp, first_offset + i)
        for i, (topic, payload, q, stamp) in enumerate(
            zip(topics, payloads, qos, timestamps_us, strict=True)
        )
    ]


__all__ = [
    "Message",
    "SparkplugTopic",
    "decode_messages",
    "fold",
    "messages_of",
    "state_payload",
]
