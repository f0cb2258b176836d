"""MQTT 5.0 properties: the 27 properties, where each may appear, and their encoding (MQTT 5.0
section 2.2.2).

A packet's properties are a Property Length (a Variable Byte Integer) followed by properties,
each an identifier (a Variable Byte Integer) and a value of the property's data type. Table 2-4
of section 2.2.2.2 says which packets (and the Will Properties of CONNECT) may carry each one;
only User Property, and Subscription Identifier in PUBLISH, may appear more than once.

:class:`Properties` holds one packet's properties, one attribute per property (None when absent;
User Property and Subscription Identifier as lists). :func:`encode_properties` and
:func:`decode_properties` write and read them for a context, a :class:`PacketType` or
:data:`WILL_PROPERTIES`; the writer raises :class:`InvalidArgument` for anything the standard
refuses, the reader :class:`MalformedFrame`, each message naming the rule and its section.

This module is the one home of table 2-4: each property's identifier, data type, packets and
repetition rule sit with its writer and its reader, so a rule of section 2.2.2 is read in one
place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, NoReturn

from .errors import InvalidArgument, InvalidTopic, MalformedFrame
from .fields import (
    MAX_VARIABLE_BYTE_INTEGER,
    U16,
    U32,
    decode_utf8,
    decode_variable_byte_integer,
    encode_variable_byte_integer,
)
from .packet_types import PacketType
from .topics import validate_topic_name


class WillContext(Enum):
    """The one property context that is not a packet: the Will Properties of a CONNECT."""

    WILL_PROPERTIES = "Will Properties"


WILL_PROPERTIES: Final = WillContext.WILL_PROPERTIES
"""Context of the Will Properties in a CONNECT payload (MQTT 5.0 section 3.1.3.2)."""

Context = PacketType | WillContext
"""Where properties are read or written: a packet type or :data:`WILL_PROPERTIES`."""


class DataType(IntEnum):
    """The data types of property values (MQTT 5.0 sections 1.5.1 to 1.5.7)."""

    BYTE = 1
    TWO_BYTE_INTEGER = 2
    FOUR_BYTE_INTEGER = 3
    VARIABLE_BYTE_INTEGER = 4
    UTF8_STRING = 5
    BINARY_DATA = 6
    UTF8_STRING_PAIR = 7


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One row of table 2-4 (MQTT 5.0 section 2.2.2.2), with the value rules of its sections.

    ``sections`` maps each context that may carry the property to the section describing it
    there; integer values must lie in ``minimum..maximum``."""

    identifier: int
    name: str
    attribute: str
    data_type: DataType
    sections: Mapping[Context, str]
    minimum: int = 0
    maximum: int = 0


_B = DataType.BYTE
_U16 = DataType.TWO_BYTE_INTEGER
_U32 = DataType.FOUR_BYTE_INTEGER
_VBI = DataType.VARIABLE_BYTE_INTEGER
_STR = DataType.UTF8_STRING
_BIN = DataType.BINARY_DATA
_PAIR = DataType.UTF8_STRING_PAIR

_TYPE_MAXIMUM = {
    _B: 0xFF,
    _U16: 0xFFFF,
    _U32: 0xFFFF_FFFF,
    _VBI: MAX_VARIABLE_BYTE_INTEGER,
}

_T = PacketType
_W = WILL_PROPERTIES


def _spec(
    identifier: int,
    name: str,
    data_type: DataType,
    sections: dict[Context, str],
    *,
    minimum: int = 0,
    maximum: int | None = None,
) -> PropertySpec:
    attribute = name.lower().replace(" ", "_").replace("-", "_")
    if identifier == 0x26:
        attribute = "user_properties"
    elif identifier == 0x0B:
        attribute = "subscription_identifiers"
    top = _TYPE_MAXIMUM.get(data_type, 0) if maximum is None else maximum
    return PropertySpec(
        identifier, name, attribute, data_type, MappingProxyType(sections), minimum, top
    )


PROPERTIES: tuple[PropertySpec, ...] = (
    _spec(0x01, "Payload Format Indicator", _B, {_T.PUBLISH: "3.3.2.3.2", _W: "3.1.3.2.3"},
          maximum=1),
    _spec(0x02, "Message Expiry Interval", _U32, {_T.PUBLISH: "3.3.2.3.3", _W: "3.1.3.2.4"}),
    _spec(0x03, "Content Type", _STR, {_T.PUBLISH: "3.3.2.3.9", _W: "3.1.3.2.5"}),
    _spec(0x08, "Response Topic", _STR, {_T.PUBLISH: "3.3.2.3.5", _W: "3.1.3.2.6"}),
    _spec(0x09, "Correlation Data", _BIN, {_T.PUBLISH: "3.3.2.3.6", _W: "3.1.3.2.7"}),
    _spec(0x0B, "Subscription Identifier", _VBI, {_T.PUBLISH: "3.3.2.3.8",
                                                  _T.SUBSCRIBE: "3.8.2.1.2"}, minimum=1),
    _spec(0x11, "Session Expiry Interval", _U32, {_T.CONNECT: "3.1.2.11.2",
                                                  _T.CONNACK: "3.2.2.3.2",
                                                  _T.DISCONNECT: "3.14.2.2.2"}),
    _spec(0x12, "Assigned Client Identifier", _STR, {_T.CONNACK: "3.2.2.3.7"}),
    _spec(0x13, "Server Keep Alive", _U16, {_T.CONNACK: "3.2.2.3.14"}),
    _spec(0x15, "Authentication Method", _STR, {_T.CONNECT: "3.1.2.11.9",
                                                _T.CONNACK: "3.2.2.3.17",
                                                _T.AUTH: "3.15.2.2.2"}),
    _spec(0x16, "Authentication Data", _BIN, {_T.CONNECT: "3.1.2.11.10",
                                              _T.CONNACK: "3.2.2.3.18",
                                              _T.AUTH: "3.15.2.2.3"}),
    _spec(0x17, "Request Problem Information", _B, {_T.CONNECT: "3.1.2.11.7"}, maximum=1),
    _spec(0x18, "Will Delay Interval", _U32, {_W: "3.1.3.2.2"}),
    _spec(0x19, "Request Response Information", _B, {_T.CONNECT: "3.1.2.11.6"}, maximum=1),
    _spec(0x1A, "Response Information", _STR, {_T.CONNACK: "3.2.2.3.15"}),
    _spec(0x1C, "Server Reference", _STR, {_T.CONNACK: "3.2.2.3.16",
                                           _T.DISCONNECT: "3.14.2.2.5"}),
    _spec(0x1F, "Reason String", _STR, {_T.CONNACK: "3.2.2.3.9", _T.PUBACK: "3.4.2.2.2",
                                        _T.PUBREC: "3.5.2.2.2", _T.PUBREL: "3.6.2.2.2",
                                        _T.PUBCOMP: "3.7.2.2.2", _T.SUBACK: "3.9.2.1.2",
                                        _T.UNSUBACK: "3.11.2.1.2",
                                        _T.DISCONNECT: "3.14.2.2.3", _T.AUTH: "3.15.2.2.4"}),
    _spec(0x21, "Receive Maximum", _U16, {_T.CONNECT: "3.1.2.11.3", _T.CONNACK: "3.2.2.3.3"},
          minimum=1),
    _spec(0x22, "Topic Alias Maximum", _U16, {_T.CONNECT: "3.1.2.11.5",
                                              _T.CONNACK: "3.2.2.3.8"}),
    _spec(0x23, "Topic Alias", _U16, {_T.PUBLISH: "3.3.2.3.4"}, minimum=1),
    _spec(0x24, "Maximum QoS", _B, {_T.CONNACK: "3.2.2.3.4"}, maximum=1),
    _spec(0x25, "Retain Available", _B, {_T.CONNACK: "3.2.2.3.5"}, maximum=1),
    _spec(0x26, "User Property", _PAIR, {_T.CONNECT: "3.1.2.11.8", _T.CONNACK: "3.2.2.3.10",
                                         _T.PUBLISH: "3.3.2.3.7", _W: "3.1.3.2.8",
                                         _T.PUBACK: "3.4.2.2.3", _T.PUBREC: "3.5.2.2.3",
                                         _T.PUBREL: "3.6.2.2.3", _T.PUBCOMP: "3.7.2.2.3",
                                         _T.SUBSCRIBE: "3.8.2.1.3", _T.SUBACK: "3.9.2.1.3",
                                         _T.UNSUBSCRIBE: "3.10.2.1.2",
                                         _T.UNSUBACK: "3.11.2.1.3",
                                         _T.DISCONNECT: "3.14.2.2.4", _T.AUTH: "3.15.2.2.5"}),
    _spec(0x27, "Maximum Packet Size", _U32, {_T.CONNECT: "3.1.2.11.4",
                                              _T.CONNACK: "3.2.2.3.6"}, minimum=1),
    _spec(0x28, "Wildcard Subscription Available", _B, {_T.CONNACK: "3.2.2.3.11"}, maximum=1),
    _spec(0x29, "Subscription Identifier Available", _B, {_T.CONNACK: "3.2.2.3.12"},
          maximum=1),
    _spec(0x2A, "Shared Subscription Available", _B, {_T.CONNACK: "3.2.2.3.13"}, maximum=1),
)  # fmt: skip
"""Table 2-4 of MQTT 5.0 section 2.2.2.2, in identifier order."""

BY_IDENTIFIER: Mapping[int, PropertySpec] = MappingProxyType(
    {spec.identifier: spec for spec in PROPERTIES}
)

USER_PROPERTY = 0x26
SUBSCRIPTION_IDENTIFIER = 0x0B
RESPONSE_TOPIC = 0x08


@dataclass(slots=True, kw_only=True, repr=False)
class Properties:
    """The properties of one MQTT 5.0 packet or Will (MQTT 5.0 section 2.2.2): one attribute
    per property of table 2-4, None when absent. ``user_properties`` keeps the (name, value)
    pairs in wire order, repeats included; ``subscription_identifiers`` holds the Subscription
    Identifiers (several only in a PUBLISH, section 3.3.2.3.8).

    The stream decoder shares one decoded instance between the PUBLISH packets of a
    connection whose property bytes are equal: treat received properties as read-only (copy
    with ``dataclasses.replace`` before changing one)."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: list[int] = field(default_factory=list)
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def __repr__(self) -> str:
        """Only the properties present, in identifier order."""
        shown = []
        for spec in PROPERTIES:
            value = getattr(self, spec.attribute)
            if value is not None and value != []:
                shown.append(f"{spec.attribute}={value!r}")
        return f"Properties({', '.join(shown)})"

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> object:
            """A property left unset by the decoder, which sets only those the packet may
            carry: None, or a new empty list for the two lists."""
            if name in _LISTS:
                value: list[object] = []
                object.__setattr__(self, name, value)
                return value
            if name in _ATTRIBUTES:
                return None
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_LISTS = frozenset({"user_properties", "subscription_identifiers"})
_ATTRIBUTES = frozenset(spec.attribute for spec in PROPERTIES)


def context_name(context: Context) -> str:
    """``"PUBLISH"``, ``"CONNACK"``, ... or ``"Will Properties"``."""
    return context.value if isinstance(context, WillContext) else context.name


def _cite(spec: PropertySpec, context: Context) -> str:
    section = spec.sections.get(context)
    return f"MQTT 5.0 section {section}" if section else "MQTT 5.0 section 2.2.2.2"


def _value_rule(spec: PropertySpec) -> str:
    if spec.maximum == 1:
        return "it must be 0 or 1"
    if spec.minimum == 1:
        return f"0 is not allowed, it must be in 1..{spec.maximum}"
    return f"it must be in {spec.minimum}..{spec.maximum}"


# ---------------------------------------------------------------------------------------------
# Writing


def encode_properties(props: Properties | None, context: Context) -> bytes:
    """Property Length and the properties of ``props`` for ``context`` (MQTT 5.0 section
    2.2.2), ``b"\\x00"`` for None. Deterministic: in identifier order, User Properties last in
    their given order. InvalidArgument for a property ``context`` may not carry (table 2-4), a
    value its section refuses, or a repeat of a property that may not repeat."""
    if props is None:
        return b"\x00"
    out = bytearray()
    where = context_name(context)
    for spec in PROPERTIES:
        ident = spec.identifier
        if ident == USER_PROPERTY:
            continue
        value = getattr(props, spec.attribute)
        if ident == SUBSCRIPTION_IDENTIFIER:
            if not value:
                continue
            _check_allowed(spec, context, where)
            if len(value) > 1 and context is not PacketType.PUBLISH:
                raise InvalidArgument(
                    f"{where}: Subscription Identifier may appear only once outside PUBLISH, "
                    f"got {len(value)} (MQTT 5.0 section 2.2.2.2, {_cite(spec, context)})"
                )
            for number in value:
                out += b"\x0b" + _encode_integer(spec, context, where, number)
            continue
        if value is None:
            continue
        _check_allowed(spec, context, where)
        out.append(ident)
        data_type = spec.data_type
        if data_type == _STR:
            if ident == RESPONSE_TOPIC:
                try:
                    validate_topic_name(value)
                except InvalidTopic as exc:
                    raise InvalidTopic(
                        f"{where}: Response Topic: {exc} ({_cite(spec, context)})"
                    ) from None
            out += _encode_string(value, f"{where}: {spec.name}")
        elif data_type == _BIN:
            out += _encode_bytes(value, f"{where}: {spec.name}")
        else:
            out += _encode_integer(spec, context, where, value)
    if props.user_properties:
        spec = BY_IDENTIFIER[USER_PROPERTY]
        _check_allowed(spec, context, where)
        for pair in props.user_properties:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise InvalidArgument(
                    f"{where}: a User Property is a (name, value) pair of strings, got "
                    f"{pair!r} (MQTT 5.0 section 1.5.7)"
                )
            name, text = pair
            out.append(USER_PROPERTY)
            out += _encode_string(name, f"{where}: User Property name")
            out += _encode_string(text, f"{where}: User Property value")
    return encode_variable_byte_integer(len(out), f"{where}: the property length") + out


def _check_allowed(spec: PropertySpec, context: Context, where: str) -> None:
    if context not in spec.sections:
        raise InvalidArgument(
            f"{where}: property {spec.name} (0x{spec.identifier:02X}) is not allowed in "
            f"{where} (MQTT 5.0 section 2.2.2.2, table 2-4)"
        )


def _encode_integer(spec: PropertySpec, context: Context, where: str, value: object) -> bytes:
    if type(value) is not int:
        raise InvalidArgument(
            f"{where}: {spec.name} must be an integer, got {value!r} ({_cite(spec, context)})"
        )
    if not spec.minimum <= value <= spec.maximum:
        raise InvalidArgument(
            f"{where}: {spec.name} {value} is not allowed: {_value_rule(spec)} "
            f"({_cite(spec, context)})"
        )
    data_type = spec.data_type
    if data_type == _B:
        return bytes((value,))
    if data_type == _U16:
        return U16.pack(value)
    if data_type == _U32:
        return U32.pack(value)
    return encode_variable_byte_integer(value, f"{where}: {spec.name}")


def _encode_string(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidArgument(f"{what} must be a string, got {text!r} (MQTT 5.0 section 1.5.4)")
    if "\x00" in text:
        raise InvalidArgument(f"{what} {text!r} contains U+0000 (MQTT 5.0 section 1.5.4)")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{what} {text!r} holds a surrogate, which UTF-8 cannot encode (MQTT 5.0 section 1.5.4)"
        ) from None
    if len(data) > 0xFFFF:
        raise InvalidArgument(
            f"{what} is {len(data)} bytes in UTF-8, more than 65535 (MQTT 5.0 section 1.5.4)"
        )
    return U16.pack(len(data)) + data


def _encode_bytes(data: object, what: str) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidArgument(f"{what} must be bytes, got {data!r} (MQTT 5.0 section 1.5.6)")
    raw = bytes(data)
    if len(raw) > 0xFFFF:
        raise InvalidArgument(
            f"{what} is {len(raw)} bytes, more than 65535 (MQTT 5.0 section 1.5.6)"
        )
    return U16.pack(len(raw)) + raw


# ---------------------------------------------------------------------------------------------
# Reading
#
# Per context, a table indexed by identifier byte: (data type, attribute, minimum, maximum,
# duplicate bit (0 for a property that may repeat there), spec), or None where the context may
# not carry that identifier. Identifiers are all below 0x80, so each is one byte on the wire.
# Data types are plain ints here, the loop compares them for every property; the two string
# kinds come last, so ``kind >= _K_STR`` picks both.

_Row = tuple[int, str, int, int, int, PropertySpec]
_K_SUBSCRIPTION_IDENTIFIER = 0  # a Variable Byte Integer kept in a list
_K_BYTE = 1
_K_U16 = 2
_K_U32 = 3
_K_VBI = 4
_K_BIN = 5
_K_STR = 6
_K_PAIR = 7
_KINDS = {
    DataType.BYTE: _K_BYTE,
    DataType.TWO_BYTE_INTEGER: _K_U16,
    DataType.FOUR_BYTE_INTEGER: _K_U32,
    DataType.VARIABLE_BYTE_INTEGER: _K_VBI,
    DataType.BINARY_DATA: _K_BIN,
    DataType.UTF8_STRING: _K_STR,
    DataType.UTF8_STRING_PAIR: _K_PAIR,
}


def _table(context: Context) -> tuple[_Row | None, ...]:
    rows: list[_Row | None] = [None] * 0x80
    for spec in PROPERTIES:
        if context in spec.sections:
            repeats = spec.identifier == USER_PROPERTY or (
                spec.identifier == SUBSCRIPTION_IDENTIFIER and context is PacketType.PUBLISH
            )
            bit = 0 if repeats else 1 << spec.identifier
            kind = _KINDS[spec.data_type]
            if spec.identifier == SUBSCRIPTION_IDENTIFIER:
                kind = _K_SUBSCRIPTION_IDENTIFIER
            rows[spec.identifier] = (
                kind,
                spec.attribute,
                spec.minimum,
                spec.maximum,
                bit,
                spec,
            )
    return tuple(rows)


_CONTEXTS: tuple[Context, ...] = (*PacketType, WILL_PROPERTIES)
_TABLES: dict[Context, tuple[_Row | None, ...]] = {c: _table(c) for c in _CONTEXTS}
_SCALARS: dict[Context, tuple[str, ...]] = {
    c: tuple(
        spec.attribute
        for spec in PROPERTIES
        if c in spec.sections and spec.identifier not in (USER_PROPERTY, SUBSCRIPTION_IDENTIFIER)
    )
    for c in _CONTEXTS
}
"""Per context, the attributes of the properties it may carry, but the two lists."""
_LISTS_IN: dict[Context, tuple[str, ...]] = {
    c: tuple(
        spec.attribute
        for spec in PROPERTIES
        if c in spec.sections and spec.identifier in (USER_PROPERTY, SUBSCRIPTION_IDENTIFIER)
    )
    for c in _CONTEXTS
}

_RESPONSE_TOPIC_BIT = 1 << RESPONSE_TOPIC
_new = object.__new__
_PUBLISH = PacketType.PUBLISH  # a module name: faster than the member read through its class


def _blank(context: Context) -> Properties:
    """A :class:`Properties` with the attributes ``context`` may carry set to None (the lists
    to new empty lists); the others are left to ``Properties.__getattr__``."""
    props: Properties = _new(Properties)
    if context is _PUBLISH:  # the hot one, spelled out
        props.payload_format_indicator = None
        props.message_expiry_interval = None
        props.content_type = None
        props.response_topic = None
        props.correlation_data = None
        props.subscription_identifiers = []
        props.topic_alias = None
        props.user_properties = []
        return props
    for attribute in _SCALARS[context]:
        setattr(props, attribute, None)
    for attribute in _LISTS_IN[context]:
        setattr(props, attribute, [])
    return props


def decode_properties(
    buf: bytes, pos: int, end: int, context: Context
) -> tuple[Properties | None, int]:
    """Read the Property Length and properties at ``buf[pos:end]`` for ``context``: (the
    properties, position after them); None rather than an empty :class:`Properties` when the
    Property Length is 0. MalformedFrame for anything MQTT 5.0 section 2.2.2 refuses."""
    if pos >= end:
        raise MalformedFrame(
            f"{context_name(context)}: the property length runs past the end of the packet "
            "(MQTT 5.0 section 2.2.2.1)"
        )
    length = buf[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = decode_variable_byte_integer(
            buf, pos, end, f"{context_name(context)} property length"
        )
    if not length:
        return None, pos
    stop = pos + length
    if stop > end:
        raise MalformedFrame(
            f"{context_name(context)}: the property length {length} runs past the end of the "
            "packet (MQTT 5.0 section 2.2.2.1)"
        )
    return read_properties(buf, pos, stop, context), stop


def read_properties(buf: bytes, pos: int, stop: int, context: Context) -> Properties:
    """The properties filling ``buf[pos:stop]`` exactly (after the Property Length), for
    ``context``; MalformedFrame for anything MQTT 5.0 section 2.2.2 refuses."""
    table = _TABLES[context]
    props = _blank(context)
    seen = 0
    while pos < stop:
        ident = buf[pos]
        row = table[ident] if ident < 0x80 else None
        if row is None:
            _refuse_identifier(buf, pos, stop, context)
        kind, attribute, low, high, bit, spec = row
        if seen & bit:
            raise MalformedFrame(
                f"{context_name(context)}: property {spec.name} appears more than once; only "
                "User Property (and Subscription Identifier in PUBLISH) may repeat "
                f"(MQTT 5.0 section 2.2.2.2, {_cite(spec, context)})"
            )
        seen |= bit
        pos += 1
        if kind >= _K_STR:
            text, pos = _read_string(buf, pos, stop, context, spec)
            if kind == _K_STR:
                setattr(props, attribute, text)
                continue
            value, pos = _read_string(buf, pos, stop, context, spec)
            props.user_properties.append((text, value))
            continue
        if kind == _K_BIN:
            if pos + 2 > stop:
                _cut_short(context, spec)
            nxt = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
            if nxt > stop:
                _cut_short(context, spec)
            setattr(props, attribute, bytes(buf[pos + 2 : nxt]))
            pos = nxt
            continue
        if kind == _K_BYTE:
            if pos >= stop:
                _cut_short(context, spec)
            number = buf[pos]
            pos += 1
        elif kind == _K_U16:
            if pos + 2 > stop:
                _cut_short(context, spec)
            number = (buf[pos] << 8) | buf[pos + 1]
            pos += 2
        elif kind == _K_U32:
            if pos + 4 > stop:
                _cut_short(context, spec)
            number = int.from_bytes(buf[pos : pos + 4], "big")
            pos += 4
        else:
            number, pos = decode_variable_byte_integer(
                buf, pos, stop, f"{context_name(context)}: {spec.name}"
            )
        if number < low or number > high:
            raise MalformedFrame(
                f"{context_name(context)}: {spec.name} {number} is a Protocol Error: "
                f"{_value_rule(spec)} ({_cite(spec, context)})"
            )
        if kind == _K_SUBSCRIPTION_IDENTIFIER:
            props.subscription_identifiers.append(number)
        else:
            setattr(props, attribute, number)
    if seen & _RESPONSE_TOPIC_BIT:
        _check_response_topic(props, context)
    return props


def _read_string(
    buf: bytes, pos: int, stop: int, context: Context, spec: PropertySpec
) -> tuple[str, int]:
    """A UTF-8 Encoded String at ``buf[pos:stop]`` (MQTT 5.0 section 1.5.4: two-byte length,
    well-formed UTF-8 without U+0000) and the position after it."""
    if pos + 2 > stop:
        _cut_short(context, spec)
    nxt = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if nxt > stop:
        _cut_short(context, spec)
    raw = buf[pos + 2 : nxt]
    if 0 in raw:
        _bad_string(raw, context, spec)
    try:
        return raw.decode(), nxt
    except UnicodeDecodeError:
        _bad_string(raw, context, spec)


def _bad_string(raw: bytes, context: Context, spec: PropertySpec) -> NoReturn:
    """Raise for a string property that breaks MQTT 5.0 section 1.5.4."""
    decode_utf8(raw, f"{context_name(context)}: {spec.name}", "MQTT 5.0 section 1.5.4")
    raise AssertionError("unreachable: decode_utf8 refuses what the caller found")


def _cut_short(context: Context, spec: PropertySpec) -> NoReturn:
    raise MalformedFrame(
        f"{context_name(context)}: property {spec.name} runs past the end of the properties "
        "(the property length must cover whole properties, MQTT 5.0 section 2.2.2.1)"
    )


def _refuse_identifier(buf: bytes, pos: int, stop: int, context: Context) -> NoReturn:
    """Raise for the identifier at ``buf[pos]``, unknown or not allowed in ``context``."""
    where = context_name(context)
    ident, _ = decode_variable_byte_integer(buf, pos, stop, f"{where}: a property identifier")
    spec = BY_IDENTIFIER.get(ident)
    if spec is None:
        raise MalformedFrame(
            f"{where}: unknown property identifier 0x{ident:02X} (MQTT 5.0 section 2.2.2.2, "
            "table 2-4)"
        )
    raise MalformedFrame(
        f"{where}: property {spec.name} (0x{ident:02X}) is not allowed in {where} "
        "(MQTT 5.0 section 2.2.2.2, table 2-4)"
    )


def _check_response_topic(props: Properties, context: Context) -> None:
    topic = props.response_topic
    if topic is None:  # pragma: no cover - only called when it was read
        return
    try:
        validate_topic_name(topic)
    except InvalidTopic as exc:
        spec = BY_IDENTIFIER[RESPONSE_TOPIC]
        raise MalformedFrame(
            f"{context_name(context)}: Response Topic: {exc} ({_cite(spec, context)})"
        ) from None
