"""The demo's pure parts: the fleet's plan. (Its reading of the Delta tables is
``devtools.delta_log``, tested in ``test_delta_log.py``.)"""

from __future__ import annotations

import json

import pytest

from devtools.demo.fleet import MALFORMED, malformed_count, plan_fleet, stamp


@pytest.mark.parametrize(("messages", "devices"), [(1, 1), (7, 3), (150, 4), (2000, 6)])
def test_plan_deals_every_message_with_gap_free_sequence_numbers(
    messages: int, devices: int
) -> None:
    fleet = plan_fleet(messages, devices)
    assert len(fleet) == devices
    assert sum(len(d.payloads) for d in fleet) == messages
    assert sum(d.malformed for d in fleet) == malformed_count(messages)
    for index, device in enumerate(fleet):
        assert len(device.payloads) == len(range(index, messages, devices))
        assert device.qos == 1 + index % 2
        readings = [json.loads(p) for p in device.payloads if p not in MALFORMED]
        assert [r["seq"] for r in readings] == list(range(device.valid))
        assert {r["device"] for r in readings} <= {device.name}
        assert device.topic == f"plant/{device.site}/{device.name}/telemetry"
    assert plan_fleet(messages, devices) == fleet, "the plan must be reproducible"


def test_a_few_malformed_messages_in_every_run_that_can_have_them() -> None:
    assert malformed_count(9) == 0
    assert malformed_count(30) == 3
    assert malformed_count(2000) == 20


def test_stamp_sets_the_publication_time_of_readings_only() -> None:
    reading = plan_fleet(2, 1)[0].payloads[0]
    stamped = json.loads(stamp(reading))
    assert stamped["ts"].endswith("+00:00") and len(stamped["ts"]) > 20
    for payload in MALFORMED:
        assert stamp(payload) == payload


def test_with_routes_each_device_sends_a_status_before_every_tenth_reading() -> None:
    (device,) = plan_fleet(25, 1, statuses=True)
    sent = device.messages()
    assert [t for t, _ in sent].count(device.status_topic) == 3 == len(device.statuses)
    assert [p for t, p in sent if t == device.topic] == device.payloads
    assert [i for i, (t, _) in enumerate(sent) if t == device.status_topic] == [0, 11, 22]
    documents = [json.loads(p) for p in device.statuses]
    assert [d["state"] for d in documents] == ["running", "idle", "maintenance"]
    assert "firmware" in documents[0] and "firmware" not in documents[1]
    assert documents[2]["alarms"][0]["code"] == 17
    assert plan_fleet(25, 1)[0].messages() == [(device.topic, p) for p in device.payloads]
