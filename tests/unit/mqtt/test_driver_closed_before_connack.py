"""A broker that closes the connection before CONNACK: the error names the likely causes.

Rule (``MqttClient.connect``): the message says which protocol level was sent and how to change
it (``--mqtt-version``, option ``mqttVersion``), whether a user name (and a password) went with
the CONNECT, and, over plain TCP only, that the port may be a TLS listener. The password itself
never appears. The brokers here are loopback servers that accept and close at once (over TLS:
right after the handshake).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import ConnectionLost
from connector.mqtt.packets import ProtocolLevel
from connector.mqtt.tls import TlsOptions
from tests.support.brokers import Pki

REPO = Path(__file__).resolve().parents[3]


@contextmanager
def closing_server(wrap: Callable[[socket.socket], socket.socket] | None = None) -> Iterator[int]:
    """A loopback server that accepts each connection and closes it at once (after ``wrap``,
    e.g. a TLS handshake); yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                if wrap is not None:
                    conn.settimeout(5)
                    conn = wrap(conn)
            except OSError:
                pass
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def connect_error(url: str, config: SessionConfig, tls: TlsOptions | None = None) -> str:
    client = MqttClient(url, config, [("t", 1)], tls=tls, connect_timeout=5.0)
    with pytest.raises(ConnectionLost) as failure:
        client.connect()
    return str(failure.value)


def test_plain_tcp_names_the_version_the_missing_user_name_and_a_tls_port() -> None:
    with closing_server() as port:
        message = connect_error(f"tcp://127.0.0.1:{port}", SessionConfig("closed-1"))
    assert "before CONNACK" in message
    assert "MQTT 3.1.1 (protocol level 4" in message
    assert "--mqtt-version" in message and "mqttVersion" in message
    assert "no user name was sent" in message
    assert f"127.0.0.1:{port} may be a TLS listener (use an ssl:// URL)" in message


def test_mqtt_3_1_with_credentials_names_the_user_and_never_the_password() -> None:
    config = SessionConfig(
        "closed-2", username="alice", password=b"s3cret-pw", level=ProtocolLevel.MQTT_3_1
    )
    with closing_server() as port:
        message = connect_error(f"tcp://127.0.0.1:{port}", config)
    assert "MQTT 3.1 (protocol level 3" in message
    assert "user name 'alice' and a password were sent" in message
    assert "s3cret-pw" not in message


def test_over_tls_the_tls_port_hint_is_left_out(pki: Pki) -> None:
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(pki.server_cert, pki.server_key)

    def handshake(conn: socket.socket) -> socket.socket:
        return server_tls.wrap_socket(conn, server_side=True)

    with closing_server(handshake) as port:
        message = connect_error(
            f"ssl://localhost:{port}",
            SessionConfig("closed-3", username="bob"),
            TlsOptions(ca_file=str(pki.ca_cert)),
        )
    assert "before CONNACK" in message
    assert "MQTT 3.1.1 (protocol level 4" in message
    assert "user name 'bob' was sent" in message
    assert "TLS listener" not in message and "ssl://" not in message.split("before CONNACK")[1]


def test_the_cli_reports_it_in_one_line() -> None:
    with closing_server() as port:
        result = subprocess.run(
            [
                sys.executable, "-m", "connector.mqtt", "sub", "--broker",
                f"tcp://127.0.0.1:{port}", "--topic", "t", "--mqtt-version", "3.1",
                "--connect-timeout", "5",
            ],
            cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "before CONNACK" in line
    assert "MQTT 3.1 (protocol level 3" in line and "--mqtt-version" in line
