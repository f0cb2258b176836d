"""A frozen receiver (the end of a ``Trigger.AvailableNow`` run) stores and acknowledges nothing
past the offset it returns, disconnects with DISCONNECT, and the broker keeps the rest of the
session's messages for the next connection (``Receiver.freeze``; MQTT 3.1.1 section 4.4).
Both kinds of shard: the receiver thread of a one-receiver query and a receiver process. A
real Mosquitto, steady traffic, no Spark."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from connector.receiver.receiver import Receiver
from connector.receiver.shard_handles import LocalShard, ShardProcess
from connector.wal import WalReader
from tests.integration.receiver_setup import options
from tests.support.brokers import BrokerFactory
from tests.support.publishing import SteadyPublisher
from tests.support.waiting import wait_until

RATE = 400.0
BEFORE = 300
"""Messages stored before the freeze."""
AFTER = 300
"""Messages the broker takes from the publisher after the freeze, while nothing is stored."""


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_frozen_receiver_stores_nothing_more_and_the_broker_keeps_the_rest(
    broker_factory: BrokerFactory, tmp_path: Path, qos: int, kind: str
) -> None:
    broker = broker_factory()
    wal = tmp_path / "wal"
    client_id = f"freeze-{kind[0]}{qos}"
    shard: LocalShard | ShardProcess
    if kind == "thread":
        own = options(broker, wal, qos, clientId=client_id)
        shard = LocalShard(own)
    else:
        shard = ShardProcess(options(broker, wal, qos, clientId=client_id, receivers="2"), 0)
        own = shard.options
    publisher = SteadyPublisher(broker.host, broker.port, "r/t", qos, RATE)
    try:
        if isinstance(shard, ShardProcess):
            shard.started()
        publisher.start()
        wait_until(
            lambda: shard.status().next >= BEFORE,
            60,
            interval=0.05,
            message=lambda: f"the WAL holds {shard.status().next} of {BEFORE}",
        )
        shard.begin_freeze()
        frozen = shard.end_freeze()
        target = frozen.next
        assert frozen.frozen
        first_duplicates = frozen.delivery["possibleDuplicates"]
        wait_until(
            lambda: f"Client {own.client_id} disconnected." in broker.log_text(),
            30,
            message=lambda: f"no DISCONNECT from {own.client_id}:\n{broker.log_text()}",
        )
        # Traffic goes on: the broker queues it for the session, the frozen WAL takes none.
        publisher.wait_acknowledged(publisher.acknowledged() + AFTER)
        assert shard.status().next == target
        published = publisher.finish()
    finally:
        publisher.close()
        shard.stop()
    assert target >= BEFORE
    assert len(published) >= target + AFTER

    # The next connection of the session gets everything the frozen receiver left.
    second = Receiver(own)
    second.start()
    try:
        wait_until(
            lambda: (
                set(WalReader(own.wal_path).read(0, second.wal.next_offset).payloads)
                >= set(published)
            ),
            60,
            interval=0.1,
            message=lambda: f"the WAL holds {second.wal.next_offset} of {len(published)}",
        )
        duplicates = first_duplicates + second.stats.possible_duplicates
        stored = second.wal.next_offset
    finally:
        second.stop()
    payloads = WalReader(own.wal_path).read(0, stored).payloads
    counts = Counter(payloads)
    assert set(counts) == set(published)
    extra = len(payloads) - len(published)
    if qos == 2:
        assert extra == 0, f"stored twice: {[p for p, n in counts.items() if n > 1][:10]}"
    else:
        assert extra == duplicates, f"{extra} extra records, {duplicates} counted"
