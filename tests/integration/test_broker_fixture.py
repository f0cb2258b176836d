"""The Mosquitto fixtures work: plain, persistent, password-protected and TLS brokers."""

from __future__ import annotations

import os
import signal
import ssl
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from devtools import system_tools
from tests.support.brokers import BrokerError, BrokerFactory, MosquittoBroker, Pki
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient
from tests.support.waiting import wait_until

TIMEOUT = 10.0
# CONNACK reason codes for refused credentials: Mosquitto 2.0 answers
# "Not authorized" (135); "Bad user name or password" (134) means the same here.
CREDENTIALS_REFUSED = {134, 135}


def test_publish_subscribe_round_trip(mosquitto: MosquittoBroker) -> None:
    assert mosquitto.url == f"tcp://127.0.0.1:{mosquitto.port}"
    assert mosquitto.running
    topic = f"{unique_id('round-')}/data"
    with PahoClient(unique_id("sub-")) as sub, PahoClient(unique_id("pub-")) as pub:
        assert sub.connect(mosquitto.host, mosquitto.port).accepted
        assert [code.value for code in sub.subscribe(topic, qos=1)] == [1]
        assert pub.connect(mosquitto.host, mosquitto.port).accepted
        pub.publish(topic, b"hello", qos=1)
        [message] = sub.wait_for_messages(1)
        assert (message.topic, message.payload, message.qos) == (topic, b"hello", 1)
        sub.disconnect()
        pub.disconnect()


def test_default_config_is_explicit(mosquitto: MosquittoBroker) -> None:
    config = mosquitto.config_path.read_text().splitlines()
    for line in (
        f"listener {mosquitto.port} 127.0.0.1",
        "allow_anonymous true",
        "max_queued_messages 1000000",
        "max_inflight_messages 20",
        "max_queued_bytes 0",
        "persistence false",
    ):
        assert line in config
    assert "running" in mosquitto.log_text()


def _queue_while_offline(
    broker: MosquittoBroker, client_id: str, topic: str, payloads: list[bytes]
) -> None:
    """Create a persistent QoS 1 session, leave, and publish `payloads` to it."""
    with PahoClient(client_id, clean_session=False) as sub:
        outcome = sub.connect(broker.host, broker.port)
        assert outcome.accepted
        sub.subscribe(topic, qos=1)
        sub.disconnect()
    with PahoClient(unique_id("pub-")) as pub:
        assert pub.connect(broker.host, broker.port).accepted
        for payload in payloads:
            pub.publish(topic, payload, qos=1)
        pub.disconnect()


def _collect_after_restart(
    broker: MosquittoBroker, client_id: str, topic: str, count: int
) -> list[bytes]:
    """Resume the persistent session and return the payloads delivered on `topic`."""
    with PahoClient(client_id, clean_session=False) as sub:
        outcome = sub.connect(broker.host, broker.port)
        assert outcome.accepted
        assert outcome.session_present
        messages = sub.wait_for_messages(count)
        sub.disconnect()
    assert all(m.topic == topic and m.qos == 1 for m in messages)
    return [m.payload for m in messages]


def test_persistent_session_survives_restart(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(persistence=True)
    port = broker.port
    client_id, topic = unique_id("durable-"), f"{unique_id('queue-')}/q"
    payloads = [f"m{i}".encode() for i in range(5)]
    _queue_while_offline(broker, client_id, topic, payloads)

    broker.restart()

    assert broker.port == port
    assert broker.persistence_file.is_file()
    assert _collect_after_restart(broker, client_id, topic, len(payloads)) == payloads
    assert broker.log_text().count("mosquitto version 2") >= 2


def test_saved_persistence_survives_kill(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(persistence=True)
    client_id, topic = unique_id("durable-"), f"{unique_id('queue-')}/q"
    payloads = [b"a", b"b", b"c"]
    _queue_while_offline(broker, client_id, topic, payloads)

    broker.save_persistence()
    broker.restart(hard=True)

    assert broker.returncode is not None
    assert not broker.crashed
    assert _collect_after_restart(broker, client_id, topic, len(payloads)) == payloads


def test_password_broker_checks_credentials(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(users={"alice": "right-secret", "bob": "other"})
    assert "allow_anonymous false" in broker.config_path.read_text()

    with PahoClient(unique_id("ok-"), username="alice", password="right-secret") as good:
        assert good.connect(broker.host, broker.port).accepted
        good.disconnect()

    for protocol in (mqtt.MQTTv311, mqtt.MQTTv5):
        with PahoClient(
            unique_id("bad-"), protocol=protocol, username="alice", password="wrong"
        ) as bad:
            outcome = bad.connect(broker.host, broker.port)
        assert outcome.reason_code is not None
        assert outcome.reason_code.is_failure
        assert outcome.reason_code.value in CREDENTIALS_REFUSED, outcome

    with PahoClient(unique_id("anon-")) as anonymous:
        outcome = anonymous.connect(broker.host, broker.port)
    assert outcome.reason_code is not None
    assert outcome.reason_code.value in CREDENTIALS_REFUSED, outcome


def test_tls_broker_trusts_only_the_test_ca(broker_factory: BrokerFactory, pki: Pki) -> None:
    broker = broker_factory(tls=pki.server_tls())
    assert broker.tls_url == f"ssl://127.0.0.1:{broker.tls_port}"
    topic = unique_id("tls-")

    with PahoClient(unique_id("tls-ok-")) as client:
        client.tls(pki.ca_cert)
        assert client.connect(broker.host, broker.tls_port).accepted
        client.subscribe(topic)
        client.publish(topic, b"secret")
        assert client.wait_for_messages(1)[0].payload == b"secret"
        client.disconnect()

    with PahoClient(unique_id("tls-wrong-ca-")) as client:
        client.tls(pki.other_ca_cert)
        with pytest.raises(ssl.SSLCertVerificationError):
            client.connect(broker.host, broker.tls_port)


def test_tls_broker_can_require_client_certificates(
    broker_factory: BrokerFactory, pki: Pki
) -> None:
    broker = broker_factory(tls=pki.server_tls(require_certificate=True))

    with PahoClient(unique_id("mtls-ok-")) as client:
        client.tls(pki.ca_cert, pki.client_cert, pki.client_key)
        assert client.connect(broker.host, broker.tls_port).accepted
        client.disconnect()

    for cert in (None, (pki.other_client_cert, pki.other_client_key)):
        with PahoClient(unique_id("mtls-refused-")) as client:
            client.tls(pki.ca_cert, *(cert or ()))
            try:
                outcome = client.connect(broker.host, broker.tls_port)
            except (ssl.SSLError, ConnectionError):
                continue  # refused during the handshake (TLS 1.2 style)
            # With TLS 1.3 the client finishes first and sees the refusal as a drop.
            assert not outcome.accepted, (cert, outcome)


def test_stop_kill_and_restart_keep_the_port(tmp_path: Path) -> None:
    with MosquittoBroker(tmp_path / "b") as broker:
        port = broker.port
        assert broker.stop() == 0
        assert not broker.running
        broker.start()
        assert broker.port == port
        broker.kill()
        assert broker.returncode == -signal.SIGKILL
        broker.restart()
        assert broker.running and broker.port == port
        assert not broker.crashed
    assert not broker.running


def test_unexpected_exit_is_reported_as_crash(tmp_path: Path) -> None:
    with MosquittoBroker(tmp_path / "b") as broker:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
        wait_until(lambda: not broker.running, TIMEOUT, message="broker still alive")
        assert broker.crashed
        assert broker.crash_returncode == -signal.SIGKILL


def test_start_failure_includes_the_broker_log(tmp_path: Path) -> None:
    broker = MosquittoBroker(tmp_path / "b", extra_config=["no_such_option 1"])
    with pytest.raises(BrokerError, match="no_such_option"):
        broker.start()
    assert not broker.running


def test_missing_mosquitto_fails_with_setup_hint(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(system_tools, "_EXTRA_BIN_DIRS", ())
    with pytest.raises(pytest.fail.Exception, match="make setup"):
        broker_factory()
