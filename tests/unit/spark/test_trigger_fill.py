"""minMessagesPerTrigger / maxTriggerDelay: skip small triggers, but never for longer than the
delay, never when nothing waits to be decided, and never under Trigger.AvailableNow."""

from __future__ import annotations

import pytest

from connector.options.source import InvalidOptionError, SourceOptions
from connector.spark.reader.stream_reader import MqttStreamReader

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


class WaitingShard:
    """Records the idle waits the reader asks of a shard."""

    def __init__(self) -> None:
        self.waits: list[tuple[float, float]] = []
        self.ended = 0

    def begin_wait_idle(self, idle: float, timeout: float) -> None:
        self.waits.append((idle, timeout))

    def end_wait_idle(self) -> None:
        self.ended += 1


def test_first_batch_wait_option_parses_with_default_and_bounds() -> None:
    assert SourceOptions.parse(BASE).first_batch_wait == 0.5
    assert SourceOptions.parse({**BASE, "firstBatchWait": "0"}).first_batch_wait == 0.0
    assert SourceOptions.parse({**BASE, "firstBatchWait": "2.5"}).first_batch_wait == 2.5
    for bad in ("-1", "later"):
        with pytest.raises(InvalidOptionError, match="'firstBatchWait'"):
            SourceOptions.parse({**BASE, "firstBatchWait": bad})


def test_the_run_s_first_offset_waits_for_every_shard_s_first_burst_once() -> None:
    from connector.spark.reader.stream_reader import FIRST_BATCH_IDLE

    settled = reader(firstBatchWait="3")
    shards = [WaitingShard(), WaitingShard()]
    settled._shards = shards  # type: ignore[assignment]
    settled._settle()
    assert [s.waits for s in shards] == [[(FIRST_BATCH_IDLE, 3.0)]] * 2
    assert [s.ended for s in shards] == [1, 1]
    assert settled._settled

    for quiet in (reader(firstBatchWait="0"), reader()):
        quiet._shards = [WaitingShard()]  # type: ignore[list-item]  # a stand-in shard
        if quiet.options.first_batch_wait:
            quiet._targets = [10]  # Trigger.AvailableNow waits for the queue already
        quiet._settle()
        assert quiet._shards[0].waits == [] and quiet._settled  # type: ignore[union-attr]
