"""MQTT 5.0 reason codes (MQTT 5.0 section 2.4, table 2-6, and each packet's table): which packet
may carry which code, their names per packet, and the check that refuses the others."""

from __future__ import annotations

from typing import cast

import pytest
from paho.mqtt.reasoncodes import ReasonCode

from connector.mqtt.errors import InvalidArgument, MalformedFrame
from connector.mqtt.packets import PacketType
from connector.mqtt.reasons import (
    CONNACK_ERRORS,
    REASON_CODE_SECTIONS,
    REASON_CODES,
    check_reason,
    is_failure,
    reason_name,
)

T = PacketType

# Each packet's table, as its section lists it.
EXPECTED = {
    T.CONNACK: {
        0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90,
        0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
    },
    T.PUBACK: {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99},
    T.PUBREC: {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99},
    T.PUBREL: {0x00, 0x92},
    T.PUBCOMP: {0x00, 0x92},
    T.SUBACK: {0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2},
    T.UNSUBACK: {0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91},
    T.DISCONNECT: {
        0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F, 0x90,
        0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0,
        0xA1, 0xA2,
    },
    T.AUTH: {0x00, 0x18, 0x19},
}  # fmt: skip


def test_each_packet_table() -> None:
    assert {k: set(v) for k, v in REASON_CODES.items()} == EXPECTED
    assert REASON_CODE_SECTIONS[T.CONNACK] == "3.2.2.2"
    assert REASON_CODE_SECTIONS[T.AUTH] == "3.15.2.1"


def test_tables_agree_with_paho_but_for_connack_payload_format_invalid() -> None:
    """paho-mqtt's table leaves 0x99 off CONNACK; MQTT 5.0 section 3.2.2.2 lists it ("The Will
    Payload does not match the specified Payload Format Indicator")."""
    paho: dict[int, set[int]] = {}
    for code, names in ReasonCode.names.items():
        for packets in names.values():
            for packet in packets:
                paho.setdefault(packet, set()).add(code)
    for kind, codes in EXPECTED.items():
        extra = {0x99} if kind is T.CONNACK else set()
        assert codes == paho[kind] | extra, kind.name


@pytest.mark.parametrize(
    ("code", "kind", "name"),
    [
        (0x00, T.CONNACK, "0x00 Success"),
        (0x00, T.DISCONNECT, "0x00 Normal disconnection"),
        (0x00, T.SUBACK, "0x00 Granted QoS 0"),
        (0x02, T.SUBACK, "0x02 Granted QoS 2"),
        (0x04, T.DISCONNECT, "0x04 Disconnect with Will Message"),
        (0x86, T.CONNACK, "0x86 Bad User Name or Password"),
        (0x8A, T.CONNACK, "0x8A Banned"),
        (0x92, T.PUBREL, "0x92 Packet Identifier not found"),
        (0x18, T.AUTH, "0x18 Continue authentication"),
        (0xA2, T.SUBACK, "0xA2 Wildcard Subscriptions not supported"),
        (0x03, T.PUBACK, "0x03 unknown reason code"),
        (0xFF, T.DISCONNECT, "0xFF unknown reason code"),
        (0x92, T.PUBACK, "0x92 Packet Identifier not found (not a PUBACK reason code)"),
        (0x00, T.PUBLISH, "0x00 Success (not a PUBLISH reason code)"),
    ],
)
def test_reason_names(code: int, kind: PacketType, name: str) -> None:
    assert reason_name(code, kind) == name


def test_is_failure() -> None:
    assert [c for c in range(256) if is_failure(c)] == list(range(0x80, 0x100))


@pytest.mark.parametrize("kind", list(EXPECTED), ids=lambda k: k.name)
def test_check_reason_accepts_the_table_and_refuses_the_rest(kind: PacketType) -> None:
    section = REASON_CODE_SECTIONS[kind]
    for code in range(256):
        if code in EXPECTED[kind]:
            assert check_reason(code, kind, received=True) == code
            assert check_reason(code, kind, received=False) == code
            continue
        with pytest.raises(MalformedFrame, match=rf"MQTT 5\.0 section {section}\)"):
            check_reason(code, kind, received=True)
        with pytest.raises(InvalidArgument, match=rf"MQTT 5\.0 section {section}\)"):
            check_reason(code, kind, received=False)


def test_check_reason_message_names_the_code() -> None:
    with pytest.raises(MalformedFrame) as info:
        check_reason(0x92, T.PUBACK, received=True)
    assert str(info.value) == (
        "PUBACK reason code 0x92 Packet Identifier not found (not a PUBACK reason code) is not "
        "one the PUBACK packet may carry (MQTT 5.0 section 3.4.2.1)"
    )


@pytest.mark.parametrize("bad", [-1, 256, None, "0"])
def test_check_reason_refuses_a_non_byte_to_send(bad: object) -> None:
    with pytest.raises(InvalidArgument, match=r"is not a byte \(MQTT 5\.0 section 2\.4"):
        check_reason(cast(int, bad), T.DISCONNECT, received=False)


def test_the_3_1_1_connack_return_codes_stay_in_errors() -> None:
    """3.1.1 return codes 1-5 are named once, by connector.mqtt.errors (3.1.1 section
    3.2.2.3); reasons.py holds only the MQTT 5.0 codes."""
    assert sorted(CONNACK_ERRORS) == [1, 2, 3, 4, 5]
