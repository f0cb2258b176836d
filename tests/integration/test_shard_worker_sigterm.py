"""A receiver process (``receivers`` > 1) stopped by SIGTERM sends DISCONNECT.

Rule (``connector.receiver.shard_worker``): SIGTERM, which reaches the receiver processes when a
job's whole process group is signalled, stops the receiver as a ``stop`` request does: DISCONNECT
(Mosquitto logs ``Client <id> disconnected.``), WAL closed, exit. A real Mosquitto, no Spark.
"""

from __future__ import annotations

import signal
from pathlib import Path

from connector.options.source import SourceOptions
from connector.receiver.shard_handles import ShardProcess
from connector.receiver.shard_worker import TERMINATED_EXIT_STATUS
from tests.support.brokers import BrokerFactory
from tests.support.waiting import wait_until


def test_sigterm_to_a_receiver_process_sends_disconnect(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    options = SourceOptions.parse(
        {
            "brokerUrl": broker.url,
            "topic": "w/#",
            "clientId": "sigterm-worker",
            "receivers": "2",
            "walPath": str(tmp_path / "wal"),
        }
    )
    shard = ShardProcess(options, 0)
    try:
        shard.started()
        shard.proc.send_signal(signal.SIGTERM)
        assert shard.proc.wait(30) == TERMINATED_EXIT_STATUS
    finally:
        shard.stop()
    wait_until(
        lambda: "Client sigterm-worker-0 disconnected." in broker.log_text(),
        10,
        message=lambda: f"no DISCONNECT; broker log:\n{broker.log_text()}",
    )
    assert "Client sigterm-worker-0 closed its connection." not in broker.log_text()
