"""Our MQTT client against Mosquitto with passwords and TLS: typed errors with clear messages.

Mosquitto 2.0 answers a bad user name or password, or a missing one, with CONNACK return code
5 "not authorized" on both 3.1 and 3.1.1 (never 4), so our client raises ``NotAuthorized``.
TLS failures raise ``TlsError``: an untrusted broker certificate during the handshake, and a
missing or foreign client certificate when the broker rejects it with an alert (with TLS 1.3
that alert arrives after the client's handshake finished, on the first read or write).
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.mqtt import (
    ConnectionLost,
    ConnectionRefused,
    NotAuthorized,
    ProtocolLevel,
    Publish,
    SessionConfig,
)
from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import BrokerUnreachable, TlsError
from connector.mqtt.tls import TlsOptions
from devtools.system_tools import run_tool
from tests.support.brokers import MosquittoBroker, Pki, TlsListener, find_tool
from tests.support.ids import unique_id
from tests.support.paho_client import connected_paho
from tests.support.waiting import wait_until

TIMEOUT = 10.0
VERSIONS = [
    pytest.param(ProtocolLevel.MQTT_3_1, id="mqtt3.1"),
    pytest.param(ProtocolLevel.MQTT_3_1_1, id="mqtt3.1.1"),
]
USERS = {"alice": "s3cret-pw"}


def client_for(
    url: str,
    topic: str,
    *,
    level: ProtocolLevel = ProtocolLevel.MQTT_3_1_1,
    username: str | None = None,
    password: str | None = None,
    tls: TlsOptions | None = None,
) -> MqttClient:
    config = SessionConfig(
        unique_id("sec-"),
        clean_session=True,
        username=username,
        password=None if password is None else password.encode(),
        level=level,
    )
    return MqttClient(url, config, [(topic, 1)], tls=tls, connect_timeout=5.0)


def round_trip(
    client: MqttClient,
    broker: MosquittoBroker,
    topic: str,
    username: str | None = None,
    password: str | None = None,
) -> Publish:
    """Publish one message on the broker's plain listener; return what ``client`` got."""
    received: list[Publish] = []
    with connected_paho(broker, username=username, password=password) as pub:
        pub.publish(topic, b"\x00secure\xff", 1)

        def arrived() -> bool:
            read = client.poll(0.05)
            received.extend(read.messages)
            client.acknowledge(read.messages, read.released)
            return bool(received)

        wait_until(arrived, TIMEOUT, interval=0, message="the message did not arrive")
    [message] = received
    assert (message.topic, message.payload, message.qos) == (topic, b"\x00secure\xff", 1)
    return message


# --------------------------------------------------------------------------------------------
# User name and password


@pytest.fixture
def password_broker(broker_factory: Callable[..., MosquittoBroker]) -> MosquittoBroker:
    return broker_factory(users=USERS)


@pytest.mark.parametrize("level", VERSIONS)
def test_right_password_connects_and_receives(
    password_broker: MosquittoBroker, level: ProtocolLevel
) -> None:
    topic = unique_id("auth/")
    with client_for(
        password_broker.url, topic, level=level, username="alice", password="s3cret-pw"
    ) as client:
        client.connect()
        round_trip(client, password_broker, topic, username="alice", password="s3cret-pw")


@pytest.mark.parametrize("level", VERSIONS)
@pytest.mark.parametrize(
    ("username", "password"),
    [("alice", "wrong"), ("mallory", "s3cret-pw"), (None, None)],
    ids=["wrong-password", "unknown-user", "anonymous"],
)
def test_refused_credentials_raise_not_authorized(
    password_broker: MosquittoBroker,
    level: ProtocolLevel,
    username: str | None,
    password: str | None,
) -> None:
    client = client_for(password_broker.url, "t", level=level, username=username, password=password)
    with pytest.raises(NotAuthorized) as refused:
        client.connect()
    assert isinstance(refused.value, ConnectionRefused)
    assert refused.value.return_code == 5
    assert str(refused.value) == "not authorized (CONNACK return code 5)"
    assert not client.connected
    # The broker logs the refusal just after sending CONNACK.
    wait_until(
        lambda: "disconnected, not authorised" in password_broker.log_text(),
        TIMEOUT,
        message="the broker did not log the refusal",
    )


def test_refusal_is_raised_by_poll_not_retried_forever(password_broker: MosquittoBroker) -> None:
    client = client_for(password_broker.url, "t", username="alice", password="wrong")
    with pytest.raises(NotAuthorized):
        client.poll(5.0)  # poll() connects on demand; a refusal is final
    assert client.connections == 0


# --------------------------------------------------------------------------------------------
# TLS


@pytest.fixture
def tls_broker(broker_factory: Callable[..., MosquittoBroker], pki: Pki) -> MosquittoBroker:
    return broker_factory(tls=pki.server_tls())


@pytest.fixture
def mtls_broker(broker_factory: Callable[..., MosquittoBroker], pki: Pki) -> MosquittoBroker:
    return broker_factory(tls=pki.server_tls(require_certificate=True))


@pytest.mark.parametrize("level", VERSIONS)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_tls_with_the_right_ca_connects_and_receives(
    tls_broker: MosquittoBroker, pki: Pki, host: str, level: ProtocolLevel
) -> None:
    topic = unique_id("tls/")
    url = f"ssl://{host}:{tls_broker.tls_port}"
    with client_for(url, topic, level=level, tls=TlsOptions(ca_file=str(pki.ca_cert))) as client:
        client.connect()
        round_trip(client, tls_broker, topic)


@pytest.mark.parametrize("ca", ["other", "system"], ids=["other-ca", "system-default-cas"])
def test_tls_with_an_untrusted_server_certificate_fails_clearly(
    tls_broker: MosquittoBroker, pki: Pki, ca: str
) -> None:
    tls = TlsOptions(ca_file=str(pki.other_ca_cert)) if ca == "other" else TlsOptions()
    client = client_for(tls_broker.tls_url, "t", tls=tls)
    with pytest.raises(TlsError) as failure:
        client.connect()
    message = str(failure.value)
    assert f"the certificate of {tls_broker.tls_url} is not trusted" in message
    assert "certificate verify failed" in str(failure.value.__cause__)
    assert "--cafile" in message
    assert not client.connected


@pytest.mark.parametrize("scheme", ["ssl", "mqtts", "tls"])
def test_tls_urls_verify_certificate_and_host_name_by_default(scheme: str) -> None:
    client = MqttClient(f"{scheme}://broker.example", SessionConfig("x", clean_session=True))
    assert client.broker.tls and client.broker.port == 8883
    assert client.tls is not None
    context = client.tls.context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


def leaf_certificate(pki: Pki, name: str, san: str) -> tuple[Path, Path]:
    """A server certificate signed by the test CA for the subject alternative names ``san``."""
    openssl = find_tool("openssl")
    key, csr, cert = (pki.directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    ext = pki.directory / f"{name}.ext"
    ext.write_text(
        "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\n"
        f"extendedKeyUsage = serverAuth\nsubjectAltName = {san}\n"
    )
    steps = [
        ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
        ["req", "-new", "-key", key, "-subj", f"/CN={name}", "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", pki.ca_cert, "-CAkey", pki.ca_key,
         "-set_serial", f"0x{uuid.uuid4().hex[:16]}", "-days", "30", "-sha256",
         "-extfile", ext, "-out", cert],
    ]  # fmt: skip
    for step in steps:
        run_tool([openssl, *map(str, step)])
    return cert, key


def broker_with_certificate_for(
    broker_factory: Callable[..., MosquittoBroker], pki: Pki, san: str
) -> MosquittoBroker:
    """A TLS broker whose certificate, signed by the trusted test CA, names only ``san``."""
    name = "cert-" + uuid.uuid4().hex[:8]
    cert, key = leaf_certificate(pki, name, san)
    return broker_factory(tls=TlsListener(cafile=pki.ca_cert, certfile=cert, keyfile=key))


def test_tls_host_name_in_the_certificate_is_accepted(
    broker_factory: Callable[..., MosquittoBroker], pki: Pki
) -> None:
    broker = broker_with_certificate_for(broker_factory, pki, "DNS:localhost")
    topic = unique_id("name/")
    url = f"ssl://localhost:{broker.tls_port}"
    with client_for(url, topic, tls=TlsOptions(ca_file=str(pki.ca_cert))) as client:
        client.connect()
        round_trip(client, broker, topic)


@pytest.mark.parametrize(
    ("san", "host", "mismatch"),
    [
        ("DNS:broker.example", "localhost", "Hostname mismatch"),
        ("DNS:localhost", "127.0.0.1", "IP address mismatch"),
    ],
    ids=["other-name", "name-but-not-address"],
)
def test_tls_host_name_not_in_the_certificate_is_refused(
    broker_factory: Callable[..., MosquittoBroker], pki: Pki, san: str, host: str, mismatch: str
) -> None:
    """A certificate signed by the trusted CA, but for another name: refused all the same."""
    broker = broker_with_certificate_for(broker_factory, pki, san)
    url = f"ssl://{host}:{broker.tls_port}"
    client = client_for(url, "t", tls=TlsOptions(ca_file=str(pki.ca_cert)))
    with pytest.raises(TlsError) as failure:
        client.connect()
    message = str(failure.value)
    assert f"the certificate of {url} is not trusted ({mismatch}" in message, message
    assert "check the CA file" in message and "the host name" in message
    assert not client.connected
    assert client.connections == 0


def test_tls_verification_can_be_switched_off(tls_broker: MosquittoBroker) -> None:
    topic = unique_id("insecure/")
    with client_for(tls_broker.tls_url, topic, tls=TlsOptions(verify=False)) as client:
        client.connect()
        round_trip(client, tls_broker, topic)


@pytest.mark.parametrize("level", VERSIONS)
def test_mutual_tls_with_the_client_certificate(
    mtls_broker: MosquittoBroker, pki: Pki, level: ProtocolLevel
) -> None:
    topic = unique_id("mtls/")
    tls = TlsOptions(str(pki.ca_cert), str(pki.client_cert), str(pki.client_key))
    with client_for(mtls_broker.tls_url, topic, level=level, tls=tls) as client:
        client.connect()
        round_trip(client, mtls_broker, topic)


def test_mutual_tls_without_a_client_certificate_fails_clearly(
    mtls_broker: MosquittoBroker, pki: Pki
) -> None:
    for _ in range(5):  # the broker's alert races our CONNECT: both orders must be clear
        client = client_for(mtls_broker.tls_url, "t", tls=TlsOptions(ca_file=str(pki.ca_cert)))
        with pytest.raises(TlsError) as failure:
            client.connect()
        message = str(failure.value)
        assert f"TLS: {mtls_broker.tls_url} rejected the connection" in message
        assert "certificate required" in message
        assert "requires a client certificate" in message and "--certfile" in message
        assert not client.connected


def test_mutual_tls_with_a_foreign_client_certificate_fails_clearly(
    mtls_broker: MosquittoBroker, pki: Pki
) -> None:
    tls = TlsOptions(str(pki.ca_cert), str(pki.other_client_cert), str(pki.other_client_key))
    client = client_for(mtls_broker.tls_url, "t", tls=tls)
    with pytest.raises(TlsError) as failure:
        client.connect()
    message = str(failure.value)
    assert f"TLS: {mtls_broker.tls_url} rejected the connection (tlsv1 alert unknown ca)" in (
        message
    )
    assert f"rejected the client certificate {pki.other_client_cert}" in message


def test_tls_rejection_is_raised_by_poll_not_retried_forever(
    mtls_broker: MosquittoBroker, pki: Pki
) -> None:
    client = client_for(mtls_broker.tls_url, "t", tls=TlsOptions(ca_file=str(pki.ca_cert)))
    with pytest.raises(TlsError):
        client.poll(5.0)
    assert client.connections == 0


def test_tls_client_to_a_plain_listener_is_a_retryable_error_with_a_hint(
    tls_broker: MosquittoBroker, pki: Pki
) -> None:
    client = client_for(
        f"ssl://127.0.0.1:{tls_broker.port}", "t", tls=TlsOptions(ca_file=str(pki.ca_cert))
    )
    with pytest.raises(BrokerUnreachable) as failure:
        client.connect()
    assert "TLS handshake with" in str(failure.value)
    assert "is it a TLS listener?" in str(failure.value)


def test_plain_client_to_a_tls_listener_gets_a_hint(tls_broker: MosquittoBroker) -> None:
    client = client_for(f"tcp://127.0.0.1:{tls_broker.tls_port}", "t")
    with pytest.raises(ConnectionLost) as failure:
        client.connect()
    assert "before CONNACK" in str(failure.value) and "use an ssl:// URL" in str(failure.value)
