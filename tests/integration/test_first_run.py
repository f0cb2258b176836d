"""The first run against a real Mosquitto, without Spark: a session made ahead
(``create_session``) queues for the query from the moment it returns; a receiver that makes the
session itself warns that nothing was queued before; each says when the broker holds its
subscriptions (docs/delivery.md, "The first run")."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from connector.mqtt.errors import BrokerUnreachable
from connector.options.source import SourceOptions
from connector.receiver.broker_session import read_record
from connector.receiver.receiver import Receiver
from connector.receiver.shards import existing_shards, shard_wal_path
from connector.source import InvalidOptionError, create_session
from connector.wal import WalReader
from devtools.broker_process import free_port
from tests.support.brokers import MosquittoBroker
from tests.support.paho_client import PahoClient
from tests.support.publishing import publish_with_cli
from tests.support.waiting import wait_until

NEW_SESSION = "new MQTT session for client id"


def raw_options(broker_url: str, wal: Path, qos: int, **extra: str) -> dict[str, str]:
    return {
        "brokerUrl": broker_url,
        "topic": "r/#",
        "qos": str(qos),
        "walPath": str(wal),
        "clientId": f"first-run-q{qos}",
        **extra,
    }


@pytest.mark.parametrize("qos", [1, 2])
def test_a_session_made_ahead_queues_from_the_moment_it_returns(
    mosquitto: MosquittoBroker, tmp_path: Path, qos: int, caplog: pytest.LogCaptureFixture
) -> None:
    wal = tmp_path / "wal"
    raw = raw_options(mosquitto.url, wal, qos)
    with PahoClient("retainer") as paho:
        assert paho.connect(mosquitto.host, mosquitto.port).accepted
        paho.publish("r/retained", b"kept", 1, retain=True)
        paho.disconnect()
    caplog.set_level(logging.INFO, logger="connector")
    sessions = create_session(raw)
    assert [(s.client_id, s.filters, s.created) for s in sessions] == [
        (f"first-run-q{qos}", ("r/#",), True)
    ]
    assert any("the broker now queues for this query" in r.getMessage() for r in caplog.records)
    assert read_record(str(wal)) == {"r/#": qos}
    # Published at once, before any receiver of the query runs: queued by the broker.
    publish_with_cli(mosquitto, "r/live", qos, 50)
    caplog.clear()
    receiver = Receiver(SourceOptions.parse(raw))
    receiver.start()
    try:
        wait_until(
            lambda: receiver.wal.next_offset >= 51,
            30,
            message=lambda: f"the WAL holds {receiver.wal.next_offset} of 51",
        )
        assert receiver.figures()["subscribed"] is True
        end = receiver.wal.next_offset
    finally:
        receiver.stop()
    assert not [r for r in caplog.records if NEW_SESSION in r.getMessage()]
    assert any("(session present)" in r.getMessage() for r in caplog.records)
    columns = WalReader(wal).read(0, end)
    # The retained message once (stored ahead, or sent again unacknowledged), never twice: the
    # receiver found the subscription recorded and did not subscribe again.
    assert sorted(columns.topics) == ["r/live"] * 50 + ["r/retained"]
    assert create_session(raw)[0].created is False, "a second call changes nothing"


def test_a_receiver_that_makes_its_session_warns(
    mosquitto: MosquittoBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = raw_options(mosquitto.url, tmp_path / "wal", 1)
    caplog.set_level(logging.INFO, logger="connector")
    for run, warned in ((1, True), (2, False)):
        caplog.clear()
        receiver = Receiver(SourceOptions.parse(raw))
        receiver.start()
        try:
            assert receiver.figures()["subscribed"] is True, f"run {run}"
        finally:
            receiver.stop()
        warnings = [r for r in caplog.records if NEW_SESSION in r.getMessage()]
        assert bool(warnings) == warned, f"run {run}: {[r.getMessage() for r in caplog.records]}"
        assert all(r.levelno == logging.WARNING for r in warnings)


def test_a_clean_session_subscribes_only_while_connected(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    raw = raw_options(mosquitto.url, tmp_path / "wal", 1, cleanSession="true")
    with pytest.raises(InvalidOptionError, match="cleanSession"):
        create_session(raw)
    receiver = Receiver(SourceOptions.parse(raw))
    receiver.start()
    try:
        assert receiver.figures()["subscribed"] is True
    finally:
        receiver.stop()
    assert receiver.figures()["subscribed"] is False


def test_each_receiver_s_session_is_made_ahead(mosquitto: MosquittoBroker, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    raw = raw_options(mosquitto.url, wal, 1, receivers="2", topics="r/a,r/b", shardBy="topics")
    del raw["topic"]
    sessions = create_session(raw)
    assert [(s.client_id, s.filters) for s in sessions] == [
        ("first-run-q1-0", ("r/a",)),
        ("first-run-q1-1", ("r/b",)),
    ]
    assert existing_shards(str(wal)) == [0, 1]
    assert read_record(shard_wal_path(str(wal), 1)) == {"r/b": 1}


def test_an_unreachable_broker_is_an_error(tmp_path: Path) -> None:
    raw = raw_options(f"tcp://127.0.0.1:{free_port()}", tmp_path / "wal", 1)
    raw["connectTimeout"] = "2"
    with pytest.raises(BrokerUnreachable):
        create_session(raw)


def test_a_query_without_wal_path_says_where_its_wal_is(
    mosquitto: MosquittoBroker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from connector.spark.reader.stream_reader import MqttStreamReader

    monkeypatch.setenv("MQTT_WAL_ROOT", str(tmp_path / "cache"))
    raw = raw_options(mosquitto.url, tmp_path / "unused", 1)
    del raw["walPath"]
    options = SourceOptions.parse(raw)
    assert not options.wal_path_given
    caplog.set_level(logging.INFO, logger="connector")
    reader = MqttStreamReader(options)
    try:
        assert reader.shards
    finally:
        reader.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "option 'walPath' not given" in w and str(tmp_path / "cache") in w for w in warnings
    ), warnings
    given = SourceOptions.parse(raw_options(mosquitto.url, tmp_path / "wal", 1))
    assert given.wal_path_given
