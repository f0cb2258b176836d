"""The state a host keeps per edge node (Sparkplug 3.0 chapter 5) and its replay rule: the rows of
a range of messages depend only on the messages, whatever ranges they were cut into."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from connector.sparkplug.messages import Message, decode_messages, fold, state_payload
from connector.sparkplug.rows import Rows
from connector.sparkplug.state import SparkplugState
from devtools.sparkplug_payloads import birth, data, death, payload, pb

NODE = "spBv1.0/plant/{}/edge1"
DEVICE = "spBv1.0/plant/{}/edge1/pump"

NBIRTH_0 = birth([("temp", 1, 10, "double_value", 20.5), ("count", 2, 3, "int_value", 1)], 0)
NBIRTH_1 = birth([("count", 7, 3, "int_value", 1), ("temp", 8, 10, "double_value", 1.0)], 1)
DBIRTH = birth([("rpm", 3, 2, "int_value", 0xFFFF)], bd_seq=-1, seq=1)


class Feed:
    """Messages with consecutive offsets and receive times a millisecond apart (or as given)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def add(self, topic: str, body: bytes, at_us: int | None = None) -> Feed:
        offset = len(self.messages)
        stamp = at_us if at_us is not None else offset * 1_000
        self.messages.append(Message(topic, body, 0, stamp, offset))
        return self


def _rows(messages: list[Message], state: SparkplugState | None = None) -> list[dict[str, Any]]:
    rows = decode_messages(messages, state or SparkplugState())
    return _as_dicts(rows)


def _as_dicts(rows: Rows) -> list[dict[str, Any]]:
    return [{name: column[i] for name, column in rows.columns.items()} for i in range(len(rows))]


def _by_offset(rows: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["offset"] == offset]


def test_alias_only_data_resolves_from_the_birth() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 21.0), (2, "int_value", 9)], 1))
    rows = _rows(feed.messages)
    nbirth = _by_offset(rows, 0)
    assert [r["metric_name"] for r in nbirth] == ["bdSeq", "temp", "count"]
    assert nbirth[0]["event"] and not nbirth[1]["event"]
    assert all(r["bd_seq"] == 0 for r in nbirth)
    ndata = _by_offset(rows, 1)
    assert [(r["metric_name"], r["alias"], r["datatype"]) for r in ndata] == [
        ("temp", 1, "Double"),
        ("count", 2, "Int32"),
    ]
    assert [r["double_value"] for r in ndata] == [21.0, None]
    assert [r["long_value"] for r in ndata] == [None, 9]
    assert [r["metric_index"] for r in ndata] == [0, 1]
    assert all(r["reason"] is None and r["bd_seq"] == 0 for r in ndata)
    assert all(r["event"] is False for r in ndata)


def test_a_field_sent_as_its_default_is_set_not_absent() -> None:
    """Alias 0, an empty name, timestamp 0 and seq 0 on the wire are values: protobuf reads an
    absent field as its default too, and the decoder tells the two apart."""
    zero = birth([("zero", 0, 3, "int_value", 5)], 0)
    feed = Feed().add(NODE.format("NBIRTH"), zero)
    feed.add(NODE.format("NDATA"), data([(0, "int_value", 7)], 1))
    feed.add(NODE.format("NDATA"), payload([{"name": "", "datatype": 3, "int_value": 1}], seq=2))
    feed.add(NODE.format("NDATA"), payload([{"alias": 0, "timestamp": 0, "int_value": 2}], seq=3))
    feed.add(NODE.format("NDATA"), payload([{"alias": 0, "int_value": 3}], seq=0))
    rows = _rows(feed.messages)
    assert [(r["metric_name"], r["alias"], r["long_value"]) for r in _by_offset(rows, 1)] == [
        ("zero", 0, 7)
    ]
    assert [(r["metric_name"], r["alias"]) for r in _by_offset(rows, 2)] == [("", None)]
    (third,) = _by_offset(rows, 3)
    assert (third["metric_name"], third["metric_timestamp"], third["long_value"]) == ("zero", 0, 2)
    (fourth,) = _by_offset(rows, 4)
    assert (fourth["seq"], fourth["metric_name"], fourth["long_value"]) == (0, "zero", 3)
    assert all(r["reason"] is None for r in rows[:-1])
    assert fourth["seq_gap"] is False


def test_a_rebirth_replaces_the_aliases_and_forgets_the_devices() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0)
    feed.add(DEVICE.format("DBIRTH"), DBIRTH)
    feed.add(DEVICE.format("DDATA"), data([(3, "int_value", 0xFFFE)], 2))
    feed.add(NODE.format("NBIRTH"), NBIRTH_1)
    feed.add(NODE.format("NDATA"), data([(7, "int_value", 4), (1, "int_value", 5)], 1))
    feed.add(DEVICE.format("DDATA"), data([(3, "int_value", 1)], 2))
    rows = _rows(feed.messages)
    ddata = _by_offset(rows, 2)
    assert [(r["metric_name"], r["datatype"], r["long_value"]) for r in ddata] == [
        ("rpm", "Int16", -2)
    ]
    after = _by_offset(rows, 4)
    assert [(r["metric_name"], r["long_value"]) for r in after] == [("count", 4), (None, 5)]
    assert after[1]["reason"] == "alias 1 is in no birth of this session"
    assert all(r["bd_seq"] == 1 for r in after)
    orphan = _by_offset(rows, 5)
    assert orphan[0]["metric_name"] is None
    assert "for device 'pump' before its DBIRTH" in orphan[0]["reason"]
    assert orphan[0]["long_value"] == 1  # kept, in the column of the field it came in


def test_data_before_any_birth_lands_with_a_reason() -> None:
    feed = Feed().add(NODE.format("NDATA"), data([(1, "double_value", 2.0)], 5))
    (row,) = _rows(feed.messages)
    assert row["metric_name"] is None
    assert row["double_value"] == 2.0
    assert row["reason"].startswith("NDATA before any NBIRTH of the edge node")


def test_an_ndeath_applies_only_with_the_current_bdseq() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0)
    feed.add(NODE.format("NDEATH"), death(7))  # a late Will of an older session
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 3.0)], 1))
    feed.add(NODE.format("NDEATH"), death(0))
    feed.add(NODE.format("NDEATH"), death(0))  # a duplicate: the session is already over
    state = SparkplugState()
    rows = _rows(feed.messages, state)
    stale = _by_offset(rows, 1)[0]
    assert (stale["death_matched"], stale["bd_seq"], stale["event"]) == (False, 7, True)
    assert "recorded, not applied" in stale["reason"]
    assert _by_offset(rows, 2)[0]["metric_name"] == "temp"
    matched = _by_offset(rows, 3)[0]
    assert (matched["death_matched"], matched["bd_seq"], matched["reason"]) == (True, 0, None)
    assert state.nodes[("plant", "edge1")].online is False
    assert _by_offset(rows, 4)[0]["death_matched"] is True  # same bdSeq: matches, changes nothing


def test_a_seq_gap_is_flagged_after_the_reorder_timeout() -> None:
    timeout = 5_000_000
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0, at_us=0)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 1), at_us=1_000_000)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 3), at_us=2_000_000)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 4), at_us=3_000_000)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 5), at_us=7_000_000)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 6), at_us=8_000_000)
    rows = _rows(feed.messages, SparkplugState(timeout))
    flags = [(r["offset"], r["seq_gap"], r["missing_seqs"]) for r in rows if r["offset"] >= 1]
    assert flags == [
        (1, False, None),
        (2, False, None),
        (3, False, None),
        (4, True, [2]),  # 5 s after seq 3 opened the gap, 2 never came
        (5, False, None),
    ]


def test_a_late_message_within_the_timeout_closes_the_gap() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0, at_us=0)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 2), at_us=1_000)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 1), at_us=2_000)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 3), at_us=9_000_000)
    rows = _rows(feed.messages, SparkplugState(5_000_000))
    assert not any(r["seq_gap"] for r in rows)


def test_seq_wraps_from_255_to_0() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), birth([("t", 1, 3, "int_value", 0)], 0, seq=254))
    for seq in (255, 0, 1):
        feed.add(NODE.format("NDATA"), data([(1, "int_value", seq)], seq), at_us=10**9)
    feed.add(NODE.format("NDATA"), data([(1, "int_value", 3)], 3), at_us=2 * 10**9)
    rows = _rows(feed.messages, SparkplugState(0))
    assert [(r["seq"], r["seq_gap"], r["missing_seqs"]) for r in rows[2:]] == [
        (255, False, None),
        (0, False, None),
        (1, False, None),
        (3, True, [2]),
    ]


def test_a_seq_outside_0_to_255_is_null_with_a_reason_and_ignored() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 300))
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 1), at_us=10**10)
    rows = _rows(feed.messages, SparkplugState(0))
    bad = _by_offset(rows, 1)[0]
    assert bad["seq"] is None and "seq 300 is outside 0-255" in bad["reason"]
    assert _by_offset(rows, 2)[0]["seq_gap"] is False


def test_state_messages_in_both_forms() -> None:
    assert state_payload(b'{"online": true, "timestamp": 5}') == (True, None)
    assert state_payload(b"OFFLINE") == (False, None)
    assert state_payload(b"{}") == (None, 'a STATE payload without a boolean "online"')
    feed = Feed().add("spBv1.0/STATE/scada", b'{"online": false, "timestamp": 1}')
    feed.add("STATE/scada", b"ONLINE")
    rows = _rows(feed.messages)
    assert [(r["message_type"], r["host_id"], r["host_online"], r["event"]) for r in rows] == [
        ("STATE", "scada", False, True),
        ("STATE", "scada", True, True),
    ]


def test_a_payload_that_does_not_decode_keeps_its_bytes() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0)
    feed.add(NODE.format("NDATA"), b"\x12\x05\x0a\x01")
    feed.add("plant/other", b"hello")
    rows = _rows(feed.messages)
    bad = _by_offset(rows, 1)[0]
    assert bad["payload"] == b"\x12\x05\x0a\x01"
    assert bad["reason"].startswith("not a Sparkplug B payload: ")
    other = _by_offset(rows, 2)[0]
    assert other["payload"] == b"hello" and "not in the Sparkplug B namespace" in other["reason"]


def test_the_state_survives_json() -> None:
    feed = Feed().add(NODE.format("NBIRTH"), NBIRTH_0).add(DEVICE.format("DBIRTH"), DBIRTH)
    feed.add(NODE.format("NDATA"), data([(1, "double_value", 1.0)], 4))
    state = SparkplugState(123)
    decode_messages(feed.messages, state)
    again = SparkplugState.from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.nodes == state.nodes
    assert again.nodes[("plant", "edge1")].missing == [2, 3]


# ---------------------------------------------------------------------------- replay


_TOPICS = [NODE.format(t) for t in ("NBIRTH", "NDATA", "NDEATH")] + [
    DEVICE.format(t) for t in ("DBIRTH", "DDATA", "DDEATH")
]


@st.composite
def _streams(draw: st.DrawFn) -> list[Message]:
    """Births, rebirths, deaths and alias-only data in any order, some payloads broken."""
    feed = Feed()
    clock = 0
    for _ in range(draw(st.integers(1, 25))):
        topic = draw(st.sampled_from(_TOPICS))
        seq = draw(st.integers(0, 255))
        kind = topic.split("/")[2]
        if kind == "NBIRTH":
            aliases = draw(st.permutations([1, 2, 3]))
            body = birth(
                [("a", aliases[0], 3, "int_value", 1), ("b", aliases[1], 10, "double_value", 2)],
                draw(st.integers(0, 3)),
                seq,
            )
        elif kind == "DBIRTH":
            body = birth([("c", draw(st.integers(1, 4)), 11, "boolean_value", True)], -1, seq)
        elif kind.endswith("DEATH"):
            body = death(draw(st.integers(0, 3))) if kind == "NDEATH" else payload([], seq=seq)
        else:
            body = data([(draw(st.integers(1, 4)), "int_value", 5)], seq)
        if draw(st.integers(0, 9)) == 0:
            body = body[: len(body) // 2]
        clock += draw(st.integers(0, 3_000_000))
        feed.add(topic, body, at_us=clock)
    return feed.messages


@settings(max_examples=150, deadline=None)
@given(messages=_streams(), cut=st.integers(0, 25), timeout_s=st.integers(0, 4))
def test_any_cut_decodes_the_same_rows(messages: list[Message], cut: int, timeout_s: int) -> None:
    """Rows of [0, n) in one go equal the rows of [0, k) then [k, n) from the state a fold
    of [0, k) gives (what the planner hands a partition), and from that state via JSON (what
    a restart finds)."""
    timeout = timeout_s * 1_000_000
    whole = decode_messages(messages, SparkplugState(timeout))
    k = min(cut, len(messages))
    head_state = SparkplugState(timeout)
    head = decode_messages(messages[:k], head_state)
    folded = SparkplugState(timeout)
    fold(messages[:k], folded)
    assert folded.to_json() == head_state.to_json()
    tail = decode_messages(messages[k:], SparkplugState.from_json(folded.to_json()))
    assert _as_dicts(whole) == _as_dicts(head) + _as_dicts(tail)


def _template_payload(
    seq: int, metrics: list[tuple[str | None, int | None, dict[str, Any]]], bd_seq: int = -1
) -> bytes:
    """A payload of Template metrics: (name, alias, template fields) each; a template's
    ``members`` are (name, datatype or None, field, value)."""
    message = pb().Payload(seq=seq, timestamp=1)
    if bd_seq >= 0:
        first = message.metrics.add()
        first.name, first.datatype, first.long_value = "bdSeq", 4, bd_seq
    for name, alias, spec in metrics:
        metric = message.metrics.add()
        if name is not None:
            metric.name, metric.datatype = name, 19
        if alias is not None:
            metric.alias = alias
        template = metric.template_value
        template.is_definition = spec.get("definition", False)
        if "ref" in spec:
            template.template_ref = spec["ref"]
        for member_name, datatype, field, value in spec["members"]:
            member = template.metrics.add()
            member.name = member_name
            if datatype is not None:
                member.datatype = datatype
            setattr(member, field, value)
    return message.SerializeToString()


def test_template_members_in_data_take_their_datatypes_from_the_births() -> None:
    """DATA leaves datatypes out ([tck-id-payloads-metric-datatype-not-req]), template members'
    too: an instance's come from its birth, a device's instance from the NBIRTH's definition."""
    definition = {"definition": True, "members": [("rpm", 2, "int_value", 0)]}
    instance = {"ref": "Motor", "members": [("rpm", 2, "int_value", 0)]}
    nbirth = _template_payload(0, [("Motor", None, definition), ("m1", 4, instance)], bd_seq=0)
    dbirth = _template_payload(
        1, [("m2", 5, {"ref": "Motor", "members": [("rpm", None, "int_value", 0)]})]
    )
    ndata = _template_payload(2, [(None, 4, {"members": [("rpm", None, "int_value", 0xFFFF)]})])
    ddata = _template_payload(3, [(None, 5, {"members": [("rpm", None, "int_value", 0xFFFE)]})])
    odd = _template_payload(4, [(None, 4, {"members": [("other", None, "int_value", 7)]})])
    feed = Feed().add(NODE.format("NBIRTH"), nbirth).add(DEVICE.format("DBIRTH"), dbirth)
    feed.add(NODE.format("NDATA"), ndata).add(DEVICE.format("DDATA"), ddata)
    feed.add(NODE.format("NDATA"), odd)
    state = SparkplugState()
    rows = _rows(feed.messages, state)

    def members(offset: int) -> list[tuple[Any, ...]]:
        (row,) = _by_offset(rows, offset)
        value = json.loads(row["template_value"])
        return [(m["name"], m["datatype"], m["value"]) for m in value["metrics"]]

    assert members(2) == [("rpm", "Int16", -1)]
    assert members(3) == [("rpm", "Int16", -2)]
    assert all(r["reason"] is None for r in rows if r["offset"] < 4)
    assert members(4) == [("other", None, 7)]
    assert "template member 'other' has no datatype" in _by_offset(rows, 4)[0]["reason"]
    assert SparkplugState.from_json(state.to_json()).nodes == state.nodes
