"""``python -m connector.mqtt sub|pub`` as a subprocess against a real Mosquitto broker.

``sub`` prints one JSON object per message (topic, base64 payload, qos, retained, duplicate,
messageId) and exits 0 after ``--count`` messages; failures exit 1 with one ``error: ...``
line on stderr and no traceback. ``pub`` prints one JSON line with the rate it reached.

To know when a live ``sub`` is subscribed, the tests wait for the broker's log line
``<client id> <qos> <filter>``: Mosquitto is single-threaded, so once it logged the
subscription it has also added it before it reads any other client's PUBLISH.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import MosquittoBroker, Pki, free_port
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient, connected_paho
from tests.support.waiting import wait_subscribed, wait_until

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0
CLI_TIMEOUT = 30.0
BINARY = bytes(range(256))
NOT_UTF8 = b"\xff\xfe\xc3\x28\x00\x80"
JSON_KEYS = {"topic", "payload", "qos", "retained", "duplicate", "messageId"}


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MQTT_USERNAME", "MQTT_PASSWORD")}
    env.update(extra)
    return env


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "connector.mqtt", *args],
        cwd=REPO,
        env=env or cli_env(),
        capture_output=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


@contextmanager
def cli_process(*args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "connector.mqtt", *args],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def assert_one_error_line(result: subprocess.CompletedProcess[bytes], *fragments: str) -> str:
    """Exit status 1, nothing on stdout, exactly one ``error:`` line on stderr; return it."""
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert result.stdout == b""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def json_lines(stdout: bytes) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stdout.decode().splitlines()]
    for line in lines:
        assert set(line) == JSON_KEYS
    return lines


# --------------------------------------------------------------------------------------------
# sub


@pytest.mark.parametrize("version", ["3.1", "3.1.1"])
def test_sub_prints_queued_messages_as_json_lines(mosquitto: MosquittoBroker, version: str) -> None:
    topic = unique_id("cli/")
    client_id = unique_id("cli-")
    with connected_paho(mosquitto, client_id, clean_session=False) as session:
        session.subscribe(topic, qos=1)
    sent = [(b"text", 1), (BINARY, 1), (b"", 2), (NOT_UTF8, 2), ("ünï".encode(), 1)]
    with connected_paho(mosquitto) as pub:
        for payload, qos in sent:
            pub.publish(topic, payload, qos)
    result = cli(
        "sub", "--broker", mosquitto.url, "--topic", topic, "--qos", "1",
        "--count", str(len(sent)), "--timeout", "20",
        "--client-id", client_id, "--no-clean-session", "--mqtt-version", version,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr == b""
    lines = json_lines(result.stdout)
    assert [base64.b64decode(line["payload"]) for line in lines] == [p for p, _ in sent]
    for line in lines:
        assert line["topic"] == topic
        assert line["qos"] == 1  # QoS 2 messages are downgraded to the subscription's QoS 1
        assert line["retained"] is False and line["duplicate"] is False
        assert isinstance(line["messageId"], int) and 1 <= line["messageId"] <= 0xFFFF
    # Every message was acknowledged: the session has nothing left to deliver.
    with (
        connected_paho(mosquitto, client_id, clean_session=False) as resumed,
        connected_paho(mosquitto) as pub,
    ):
        pub.publish(topic, b"sentinel", 1)
        assert [m.payload for m in resumed.wait_for_messages(1)] == [b"sentinel"]


QOS2_QUEUE = 1000
"""QoS 2 messages queued for a session: Mosquitto 2.0.11 sends a backlog beyond its inflight
limit once acknowledgements flow, so a run ends with PUBRECs the session's window (256)
still holds and PUBRELs still owed."""


def queue_qos2(broker: MosquittoBroker, client_id: str, topic: str, count: int) -> list[bytes]:
    """Make ``client_id``'s persistent session subscribe to ``topic`` at QoS 2, then publish
    ``count`` QoS 2 messages (distinct payloads) that the broker queues for it."""
    with connected_paho(broker, client_id, clean_session=False) as session:
        session.subscribe(topic, qos=2)
    result = cli(
        "pub", "--broker", broker.url, "--topic", topic, "--qos", "2",
        "--count", str(count), "--size", "10",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    return [b"%010d" % i for i in range(count)]


def sub_qos2(broker: MosquittoBroker, client_id: str, topic: str, count: int, timeout: float):
    """``sub --count count --qos 2 --no-clean-session`` as ``client_id``."""
    return cli(
        "sub", "--broker", broker.url, "--topic", topic, "--qos", "2", "--no-clean-session",
        "--client-id", client_id, "--count", str(count), "--timeout", str(timeout),
    )  # fmt: skip


def test_sub_count_completes_every_qos2_exchange_before_it_disconnects(
    mosquitto: MosquittoBroker,
) -> None:
    """Rule: after the N-th message ``sub`` sends the PUBRECs the window held, completes
    each printed message's exchange (PUBREL in, PUBCOMP out), then sends DISCONNECT, so the
    next run with the session gets none of them again."""
    topic = unique_id("q2all/")
    client_id = unique_id("cli-")
    sent = queue_qos2(mosquitto, client_id, topic, QOS2_QUEUE)

    first = sub_qos2(mosquitto, client_id, topic, QOS2_QUEUE, 60)
    assert first.returncode == 0, first.stderr.decode()
    assert sorted(base64.b64decode(x["payload"]) for x in json_lines(first.stdout)) == sent
    wait_until(
        lambda: f"Client {client_id} disconnected." in mosquitto.log_text(),
        TIMEOUT,
        message=f"{client_id} closed without DISCONNECT",
    )

    again = sub_qos2(mosquitto, client_id, topic, 1, 2)
    assert_one_error_line(again, "timed out after 2.0 s with 0 message(s) of 1")


def test_sub_count_below_the_queue_leaves_the_rest_for_the_next_run(
    mosquitto: MosquittoBroker,
) -> None:
    """Rule: ``sub --count N`` prints at most N messages and acknowledges only those; the
    messages beyond N stay with the broker, and the next run prints exactly them."""
    topic = unique_id("q2part/")
    client_id = unique_id("cli-")
    sent = queue_qos2(mosquitto, client_id, topic, QOS2_QUEUE)
    head = 400

    first = sub_qos2(mosquitto, client_id, topic, head, 60)
    assert first.returncode == 0, first.stderr.decode()
    printed = [base64.b64decode(x["payload"]) for x in json_lines(first.stdout)]
    assert len(printed) == head

    rest = sub_qos2(mosquitto, client_id, topic, QOS2_QUEUE - head, 60)
    assert rest.returncode == 0, rest.stderr.decode()
    printed += [base64.b64decode(x["payload"]) for x in json_lines(rest.stdout)]
    assert sorted(printed) == sent, "a message was printed twice or never"

    again = sub_qos2(mosquitto, client_id, topic, 1, 2)
    assert_one_error_line(again, "timed out after 2.0 s with 0 message(s) of 1")


def test_sub_prints_live_retained_and_qos0_messages(mosquitto: MosquittoBroker) -> None:
    root = unique_id("live")
    client_id = unique_id("cli-")
    with connected_paho(mosquitto) as pub:
        pub.publish(f"{root}/kept", b"retained", 1, retain=True)
        with cli_process(
            "sub", "--broker", mosquitto.url, "--topic", f"{root}/#", "--topic", "elsewhere",
            "--qos", "2", "--count", "4", "--timeout", "20", "--client-id", client_id,
        ) as proc:  # fmt: skip
            wait_subscribed(mosquitto, client_id, "elsewhere", 2)
            pub.publish(f"{root}/a", b"zero", 0)
            pub.publish("elsewhere", b"two", 2)
            pub.publish(f"{root}/b/c", NOT_UTF8, 1)
            stdout, stderr = proc.communicate(timeout=CLI_TIMEOUT)
    assert proc.returncode == 0, stderr.decode()
    lines = json_lines(stdout)
    got = [
        (x["topic"], base64.b64decode(x["payload"]), x["qos"], x["retained"], x["duplicate"])
        for x in lines
    ]
    assert got == [
        (f"{root}/kept", b"retained", 1, True, False),
        (f"{root}/a", b"zero", 0, False, False),
        ("elsewhere", b"two", 2, False, False),
        (f"{root}/b/c", NOT_UTF8, 1, False, False),
    ]
    assert lines[1]["messageId"] is None
    assert all(isinstance(x["messageId"], int) for x in lines if x["qos"])


def test_sub_timeout_without_messages(mosquitto: MosquittoBroker) -> None:
    start = time.monotonic()
    result = cli(
        "sub", "--broker", mosquitto.url, "--topic", unique_id("quiet/"), "--count", "2",
        "--timeout", "1",
    )  # fmt: skip
    assert_one_error_line(result, "timed out after 1.0 s with 0 message(s) of 2")
    assert time.monotonic() - start < 10


def test_sub_timeout_holds_while_the_broker_is_down(mosquitto: MosquittoBroker) -> None:
    client_id = unique_id("cli-")
    topic = unique_id("down/")
    with cli_process(
        "sub", "--broker", mosquitto.url, "--topic", topic, "--count", "1",
        "--timeout", "4", "--client-id", client_id,
    ) as proc:  # fmt: skip
        wait_subscribed(mosquitto, client_id, topic, 1)
        mosquitto.stop()
        stdout, stderr = proc.communicate(timeout=15)
    text = stderr.decode()
    assert proc.returncode == 1, text
    assert stdout == b""
    assert "Traceback" not in text
    assert text.splitlines()[-1] == "error: timed out after 4.0 s with 0 message(s) of 1"
    assert "connection to" in text  # the loss was logged as a warning


@pytest.mark.parametrize("how", ["option", "environment"])
def test_sub_with_a_wrong_password_fails_in_one_line(
    broker_factory: Callable[..., MosquittoBroker], how: str
) -> None:
    broker = broker_factory(users={"alice": "right-pw"})
    args = ["sub", "--broker", broker.url, "--topic", "t", "--timeout", "5"]
    args += ["--username", "alice", "--allow-password-over-plain-tcp"]
    if how == "option":
        result = cli(*args, "--password", "Wr0ng-pw")
    else:
        result = cli(*args, env=cli_env(MQTT_PASSWORD="Wr0ng-pw"))
    line = assert_one_error_line(result)
    assert line == "error: not authorized (CONNACK return code 5)"
    assert "Wr0ng-pw" not in result.stderr.decode()


def test_sub_with_the_right_password_receives(
    broker_factory: Callable[..., MosquittoBroker],
) -> None:
    broker = broker_factory(users={"alice": "right-pw"})
    client_id = unique_id("cli-")
    topic = unique_id("auth/")
    with cli_process(
        "sub", "--broker", broker.url, "--topic", topic, "--count", "1", "--timeout", "20",
        "--client-id", client_id, "--username", "alice", "--password", "right-pw",
        "--allow-password-over-plain-tcp",
    ) as proc:  # fmt: skip
        wait_subscribed(broker, client_id, topic, 1)
        with PahoClient(unique_id("paho-"), username="alice", password="right-pw") as pub:
            assert pub.connect(broker.host, broker.port).accepted
            pub.publish(topic, b"ok", 1)
            pub.disconnect()
        stdout, stderr = proc.communicate(timeout=CLI_TIMEOUT)
    assert proc.returncode == 0, stderr.decode()
    assert [base64.b64decode(x["payload"]) for x in json_lines(stdout)] == [b"ok"]


def test_sub_over_tls(broker_factory: Callable[..., MosquittoBroker], pki: Pki) -> None:
    broker = broker_factory(tls=pki.server_tls())
    topic = unique_id("tls/")
    client_id = unique_id("cli-")
    with connected_paho(broker, client_id, clean_session=False) as session:
        session.subscribe(topic, qos=1)
    with connected_paho(broker) as pub:
        pub.publish(topic, b"over tls", 1)
    url = f"ssl://localhost:{broker.tls_port}"
    common = ["sub", "--broker", url, "--topic", topic, "--timeout", "10"]
    common += ["--client-id", client_id, "--no-clean-session", "--count", "1"]

    untrusted = cli(*common, "--cafile", str(pki.other_ca_cert))
    assert_one_error_line(untrusted, f"TLS: the certificate of {url} is not trusted", "--cafile")

    trusted = cli(*common, "--cafile", str(pki.ca_cert))
    assert trusted.returncode == 0, trusted.stderr.decode()
    [line] = json_lines(trusted.stdout)
    assert (line["topic"], base64.b64decode(line["payload"])) == (topic, b"over tls")


def test_sub_over_mutual_tls(broker_factory: Callable[..., MosquittoBroker], pki: Pki) -> None:
    broker = broker_factory(tls=pki.server_tls(require_certificate=True))
    common = ["sub", "--broker", broker.tls_url, "--topic", "t", "--timeout", "10"]
    common += ["--cafile", str(pki.ca_cert)]

    no_certificate = cli(*common)
    assert_one_error_line(
        no_certificate, "rejected the connection", "requires a client certificate", "--certfile"
    )

    # With the certificate the connection is accepted; nothing is published, so it times out.
    with_certificate = cli(
        *common, "--count", "1", "--timeout", "1",
        "--certfile", str(pki.client_cert), "--keyfile", str(pki.client_key),
    )  # fmt: skip
    assert_one_error_line(with_certificate, "timed out after 1.0 s")


def test_sub_unreachable_broker() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    result = cli("sub", "--broker", url, "--topic", "t", "--connect-timeout", "2")
    assert_one_error_line(result, f"cannot connect to {url}")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--broker", "ftp://127.0.0.1:1"], "scheme 'ftp' is not supported"),
        (["--topic", "a/#/b"], "--topic 'a/#/b'"),
        (["--mqtt-version", "3.1", "--client-id", "c" * 24], "1 to 23 characters"),
        (["--cafile", "/nonexistent"], "need an ssl://, mqtts:// or wss:// broker URL"),
    ],
    ids=["scheme", "filter", "3.1-client-id", "tls-options-without-tls"],
)
def test_sub_rejects_bad_arguments_in_one_line(args: list[str], fragment: str) -> None:
    base = {"--broker": "tcp://127.0.0.1:1", "--topic": "t"}
    for flag in ("--broker", "--topic"):
        if flag not in args:
            args = [*args, flag, base[flag]]
    assert_one_error_line(cli("sub", *args), fragment)


# --------------------------------------------------------------------------------------------
# pub


@pytest.mark.parametrize(("qos", "version"), [(0, "3.1.1"), (1, "3.1.1"), (1, "3.1"), (2, "3.1")])
def test_pub_messages_arrive_and_the_rate_is_printed(
    mosquitto: MosquittoBroker, qos: int, version: str
) -> None:
    topic = unique_id("pub/")
    with connected_paho(mosquitto) as sub:
        sub.subscribe(topic, qos=2)
        result = cli(
            "pub", "--broker", mosquitto.url, "--topic", topic, "--count", "300",
            "--qos", str(qos), "--size", "50", "--inflight", "16", "--mqtt-version", version,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        received = sub.wait_for_messages(300)
    [line] = result.stdout.decode().splitlines()
    report = json.loads(line)
    assert set(report) == {"published", "seconds", "rate"}
    assert report["published"] == 300
    assert report["seconds"] > 0 and report["rate"] > 0
    assert report["rate"] == pytest.approx(300 / report["seconds"], rel=0.05, abs=2)
    assert [m.payload for m in received] == [(b"%010d" % i).ljust(50, b"x") for i in range(300)]
    assert {(m.topic, m.qos, m.retain) for m in received} == {(topic, qos, False)}


def test_pub_retained_payload_reaches_a_later_subscriber(mosquitto: MosquittoBroker) -> None:
    topic = unique_id("pubret/")
    result = cli(
        "pub", "--broker", mosquitto.url, "--topic", topic, "--payload", "hello ✓",
        "--qos", "1", "--retain",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["published"] == 1
    with connected_paho(mosquitto) as sub:
        sub.subscribe(topic, qos=1)
        [message] = sub.wait_for_messages(1)
    assert (message.payload, message.retain, message.qos) == ("hello ✓".encode(), True, 1)


def test_pub_wrong_password_fails_in_one_line(
    broker_factory: Callable[..., MosquittoBroker],
) -> None:
    broker = broker_factory(users={"alice": "right-pw"})
    result = cli(
        "pub", "--broker", broker.url, "--topic", "t", "--username", "alice",
        "--password", "nope", "--allow-password-over-plain-tcp",
    )  # fmt: skip
    assert_one_error_line(result, "not authorized")


@pytest.mark.parametrize("command", ["sub", "pub"])
def test_a_password_over_plain_tcp_is_refused_without_the_opt_in(
    broker_factory: Callable[..., MosquittoBroker], command: str
) -> None:
    broker = broker_factory(users={"alice": "right-pw"})
    result = cli(
        command, "--broker", broker.url, "--topic", "t", "--username", "alice",
        env=cli_env(MQTT_PASSWORD="right-pw"),
    )  # fmt: skip
    line = assert_one_error_line(result, "--allow-password-over-plain-tcp")
    assert "unencrypted" in line and "right-pw" not in result.stderr.decode()
    assert "New client connected" not in broker.log_text(), "refused before connecting"
