"""What the receiver's integration tests set up against a real Mosquitto: a receiver's
options (:func:`options`); they publish through our own client's command line
(:func:`tests.support.publishing.publish_with_cli`)."""

from __future__ import annotations

from pathlib import Path

from connector.options.source import SourceOptions
from tests.support.brokers import MosquittoBroker


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
