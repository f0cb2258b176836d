"""minMessagesPerTrigger / maxTriggerDelay: skip small triggers, but never for longer than the
delay, never when nothing waits to be decided, and never under Trigger.AvailableNow."""

from __future__ import annotations

import pytest

from connector.source.options import InvalidOptionError, SourceOptions
from connector.source.reader import MqttStreamReader

BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": "plant/#"}


def reader(**extra: str) -> MqttStreamReader:
    return MqttStreamReader(SourceOptions.parse({**BASE, **extra}))


def test_options_parse_with_defaults_and_bounds() -> None:
    options = SourceOptions.parse({**BASE, "minMessagesPerTrigger": "500"})
    assert (options.min_messages_per_trigger, options.max_trigger_delay) == (500, 15.0)
    assert SourceOptions.parse(BASE).min_messages_per_trigger is None
    with pytest.raises(InvalidOptionError, match=r"'minMessagesPerTrigger'.*must not exceed"):
        SourceOptions.parse({**BASE, "minMessagesPerTrigger": "10", "maxMessagesPerTrigger": "5"})
    with pytest.raises(InvalidOptionError, match="'maxTriggerDelay'"):
        SourceOptions.parse({**BASE, "maxTriggerDelay": "soon"})


def test_small_triggers_wait_until_the_delay_has_passed() -> None:
    held = reader(minMessagesPerTrigger="100", maxTriggerDelay="3600")
    assert held._hold_back(1)
    assert held._hold_back(99)
    assert not held._hold_back(100)
    assert held._hold_back(0), "no data: no batch either way"
    due = reader(minMessagesPerTrigger="100", maxTriggerDelay="0")
    assert not due._hold_back(1), "the delay is over: a small batch runs"
    assert due._hold_back(0)


def test_no_minimum_and_available_now_never_hold_back() -> None:
    assert not reader()._hold_back(1)
    available_now = reader(minMessagesPerTrigger="100", maxTriggerDelay="3600")
    available_now._targets = [5]
    assert not available_now._hold_back(5)
