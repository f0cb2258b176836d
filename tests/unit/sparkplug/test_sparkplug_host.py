"""The host role, sans-I/O: STATE payloads, the rebirth request's bytes (read by pysparkplug's
protobuf classes) and when a request is due (Sparkplug 3.0 sections 4.2.3 and 5)."""

from __future__ import annotations

import json

import pytest

from connector.sparkplug.host import (
    REBIRTH_METRIC,
    SparkplugHost,
    ncmd_topic,
    rebirth_request,
    state_payload,
    state_topic,
)
from connector.sparkplug.payload import decode_payload, value_of
from connector.sparkplug.wire import read_varint, varint
from devtools.sparkplug_payloads import birth, data, death, pb

N = "spBv1.0/plant/{}/edge1"
D = "spBv1.0/plant/{}/edge1/pump"
SECOND = 1_000_000
NBIRTH = birth([("t", 1, 10, "double_value", 1.0)], 0)


def _host(reorder_s: int = 5, interval_s: int = 30) -> SparkplugHost:
    return SparkplugHost("scada", reorder_s * SECOND, interval_s * SECOND)


def test_state_payloads_and_topic() -> None:
    assert state_topic("scada") == "spBv1.0/STATE/scada"
    assert json.loads(state_payload(True, 1_700_000_000_123)) == {
        "online": True,
        "timestamp": 1_700_000_000_123,
    }
    assert json.loads(state_payload(False, 5)) == {"online": False, "timestamp": 5}


def test_the_rebirth_request_reads_as_sparkplug_says() -> None:
    data_ = rebirth_request(1_700_000_000_123)
    theirs = pb().Payload()
    theirs.ParseFromString(data_)
    assert theirs.timestamp == 1_700_000_000_123
    assert not theirs.HasField("seq")  # [tck-id-payloads-ncmd-seq]
    (metric,) = theirs.metrics
    assert (metric.name, metric.datatype, metric.boolean_value) == (REBIRTH_METRIC, 11, True)
    assert metric.timestamp == 1_700_000_000_123
    ours = decode_payload(data_)
    assert (ours.metrics[0].name, value_of(ours.metrics[0])) == (REBIRTH_METRIC, True)
    assert ncmd_topic("plant", "edge1") == "spBv1.0/plant/NCMD/edge1"


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**64 - 1])
def test_varints_written_read_back(value: int) -> None:
    encoded = varint(value)
    assert read_varint(encoded, 0, len(encoded)) == (value, len(encoded))


def test_varints_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        varint(2**64)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        varint(-1)


def _topics(requests: list[tuple[str, bytes]]) -> list[str]:
    return [topic for topic, _ in requests]


def test_data_before_the_birth_asks_once_per_interval() -> None:
    host = _host(interval_s=30)
    ndata = data([(1, "double_value", 2.0)], 5)
    assert _topics(host.observe(N.format("NDATA"), ndata, 0)) == ["spBv1.0/plant/NCMD/edge1"]
    assert host.observe(N.format("NDATA"), data([(1, "double_value", 2.0)], 6), SECOND) == []
    again = host.observe(N.format("NDATA"), data([(1, "double_value", 2.0)], 7), 31 * SECOND)
    assert _topics(again) == ["spBv1.0/plant/NCMD/edge1"]
    assert host.requests_sent == 2
    payload = decode_payload(again[0][1])
    assert payload.timestamp == 31_000  # milliseconds of the time given


def test_known_aliases_ask_nothing_and_an_unknown_one_asks() -> None:
    host = _host()
    assert host.observe(N.format("NBIRTH"), NBIRTH, 0) == []
    assert host.observe(N.format("NDATA"), data([(1, "double_value", 2.0)], 1), 1) == []
    unknown = host.observe(N.format("NDATA"), data([(9, "double_value", 2.0)], 2), 2)
    assert _topics(unknown) == ["spBv1.0/plant/NCMD/edge1"]


def test_a_device_before_its_birth_and_a_bad_payload_ask() -> None:
    host = _host(interval_s=0)
    host.observe(N.format("NBIRTH"), NBIRTH, 0)
    assert _topics(host.observe(D.format("DDATA"), data([(3, "int_value", 1)], 1), 1)) == [
        "spBv1.0/plant/NCMD/edge1"
    ]
    assert _topics(host.observe(N.format("NDATA"), b"\x12\x09broken", 2)) == [
        "spBv1.0/plant/NCMD/edge1"
    ]


def test_deaths_states_and_commands_ask_nothing() -> None:
    host = _host(interval_s=0)
    host.observe(N.format("NBIRTH"), NBIRTH, 0)
    assert host.observe(N.format("NDEATH"), death(7), 1) == []  # a stale Will: not news
    assert host.observe("spBv1.0/STATE/other", b'{"online": true, "timestamp": 1}', 2) == []
    assert host.observe(N.format("NCMD"), rebirth_request(3), 3) == []
    assert host.observe("plant/other", b"x", 4) == []
    assert host.requests_sent == 0


def test_a_gap_asks_after_the_reorder_timeout_on_a_message_or_a_tick() -> None:
    host = _host(reorder_s=5, interval_s=0)
    host.observe(N.format("NBIRTH"), NBIRTH, 0)
    assert host.observe(N.format("NDATA"), data([(1, "double_value", 1.0)], 3), SECOND) == []
    assert host.tick(5 * SECOND) == []  # seq 1 and 2 missing, within the timeout
    assert _topics(host.tick(6 * SECOND)) == ["spBv1.0/plant/NCMD/edge1"]
    late = host.observe(N.format("NDATA"), data([(1, "double_value", 1.0)], 4), 7 * SECOND)
    assert _topics(late) == ["spBv1.0/plant/NCMD/edge1"]  # the message that flags the gap
    assert host.tick(20 * SECOND) == []  # flagged: nothing missing any more


def test_a_late_message_within_the_timeout_asks_nothing() -> None:
    host = _host(reorder_s=5, interval_s=0)
    host.observe(N.format("NBIRTH"), NBIRTH, 0)
    host.observe(N.format("NDATA"), data([(1, "double_value", 1.0)], 2), SECOND)
    host.observe(N.format("NDATA"), data([(1, "double_value", 1.0)], 1), 2 * SECOND)
    assert host.tick(60 * SECOND) == []
    assert host.requests_sent == 0
