"""An MQTT 5 PUBLISH's properties as the WAL stores them: the receiver encodes, the reader
decodes.

The WAL keeps each row's properties as opaque bytes (:mod:`connector.wal`, record kind 6):
the properties of the PUBLISH in their wire encoding (MQTT 5.0 section 3.3.2.3), without the
Property Length in front (the WAL delimits them) and without Topic Alias (section 3.3.2.3.4:
an alias belongs to one connection, and the session already resolved it into the topic). A
message without properties stores ``b""``. What a consumer sees of them, and under which
names, is :func:`connector.mqtt.message_properties.message_properties`.
"""

from __future__ import annotations

import dataclasses

from connector.mqtt.errors import MalformedFrame
from connector.mqtt.fields import decode_variable_byte_integer
from connector.mqtt.packets import PacketType
from connector.mqtt.properties import Properties, encode_properties, read_properties


def encode_for_wal(props: Properties | None) -> bytes:
    """The bytes the WAL stores for a PUBLISH's ``props``: ``b""`` for None, else the
    properties' wire encoding without Property Length and Topic Alias."""
    if props is None:
        return b""
    if props.topic_alias is not None:
        props = dataclasses.replace(props, topic_alias=None)
    encoded = encode_properties(props, PacketType.PUBLISH)
    _, start = decode_variable_byte_integer(encoded, 0, len(encoded), "the property length")
    return encoded[start:]


def decode_from_wal(data: bytes) -> Properties | None:
    """The properties :func:`encode_for_wal` stored (None for ``b""``); ValueError naming
    the rule when the bytes are no PUBLISH properties."""
    if not data:
        return None
    try:
        return read_properties(data, 0, len(data), PacketType.PUBLISH)
    except MalformedFrame as exc:
        raise ValueError(f"stored MQTT 5 properties do not decode: {exc}") from None
