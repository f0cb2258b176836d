"""A receiver that drops retained messages (``drop_retained``: every shard but the first under
``shardBy=share``) against real Mosquitto: it acknowledges them, so the broker never sends them
again, and stores only the live messages."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from connector.receiver.receiver import Receiver
from connector.wal import WalReader
from tests.integration.receiver_setup import options
from tests.support.brokers import MosquittoBroker
from tests.support.paho_client import PahoClient
from tests.support.publishing import publish_with_cli
from tests.support.waiting import wait_until


def receive(receiver: Receiver, broker: MosquittoBroker, topic: str, qos: int, count: int) -> None:
    """Start ``receiver``, publish ``count`` messages on ``topic``, stop it once its WAL holds
    that many more records."""
    wanted = receiver.wal.next_offset + count
    receiver.start()
    try:
        publish_with_cli(broker, topic, qos, count)
        wait_until(
            lambda: receiver.wal.next_offset >= wanted,
            15,
            message=lambda: f"WAL holds {receiver.wal.next_offset} of {wanted}",
        )
    finally:
        receiver.stop()


@pytest.mark.parametrize("qos", [1, 2])
def test_retained_messages_are_acknowledged_and_never_stored(
    mosquitto: MosquittoBroker, tmp_path: Path, qos: int, caplog: pytest.LogCaptureFixture
) -> None:
    with PahoClient(f"retainer-q{qos}") as paho:
        assert paho.connect(mosquitto.host, mosquitto.port).accepted
        paho.publish("r/kept", b"retained", qos, retain=True)
        paho.disconnect()
    wal = tmp_path / "wal"
    opts = options(mosquitto, wal, qos)
    with caplog.at_level(logging.DEBUG, logger="connector.receiver.receiver"):
        # Mosquitto sends the retained message on subscribe, before anything published later.
        receive(Receiver(opts, drop_retained=True), mosquitto, "r/live", qos, 5)
    assert "dropped 1 retained message(s)" in caplog.text
    # Same session, storing everything: an unacknowledged retained message would come again.
    receive(Receiver(opts), mosquitto, "r/later", qos, 3)
    columns = WalReader(wal).read(0, 8)
    assert columns.topics == ["r/live"] * 5 + ["r/later"] * 3
    assert not any(columns.retain)
