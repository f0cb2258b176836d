"""What the receiver's integration tests set up against a real Mosquitto: a receiver's
options (:func:`options`) and messages published through our own client's command line
(:func:`publish`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.common import REPO_ROOT, pub_command
from connector.options.source import SourceOptions
from tests.brokers import MosquittoBroker


def publish(broker: MosquittoBroker, topic: str, qos: int, count: int, size: int = 20) -> None:
    """Publish ``count`` messages of ``size`` bytes on ``topic`` at ``qos`` with
    ``python -m connector.mqtt pub``; return when the command has finished."""
    subprocess.run(
        pub_command(broker.url, topic, qos, count, size),
        check=True,
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
    )


def options(broker: MosquittoBroker, wal: Path, qos: int, **extra: str) -> SourceOptions:
    """A receiver's options: ``r/#`` on ``broker`` at ``qos``, its WAL at ``wal``, a client id
    per QoS; ``extra`` options on top."""
    raw = {
        "brokerUrl": broker.url,
        "topic": "r/#",
        "qos": str(qos),
        "walPath": str(wal),
        "clientId": f"receiver-test-q{qos}",
        "keepAlive": "30",
    }
    raw.update(extra)
    return SourceOptions.parse(raw)
