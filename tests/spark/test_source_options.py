"""Option validation at ``load()`` before any connection, and the password kept out of every
place a query leaves text: plans, progress, errors, the WAL and the checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import select
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tests.brokers import LOOPBACK, BrokerFactory
from tests.spark.conftest import (
    StreamDirs,
    assert_exactly_once,
    mqtt_reader,
    numbered,
    publish,
    to_delta,
    unique_id,
    wait_for_rows,
    wait_subscribed,
)

FAIL_TIMEOUT = 120.0


@pytest.fixture
def silent_listener() -> Iterator[socket.socket]:
    """A loopback port that listens but never accepts: any connection attempt would queue."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((LOOPBACK, 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


def connection_attempted(server: socket.socket) -> bool:
    """Whether a client connected to ``server``. The kernel completes a loopback handshake
    before ``connect()`` returns, so an attempt made before now is already queued."""
    readable, _, _ = select.select([server], [], [], 0)
    return bool(readable)


INVALID = [
    pytest.param({"brokerUrl": None}, ["'brokerUrl'", "required"], id="missing-brokerUrl"),
    pytest.param({"brokerUrl": "http://{addr}"}, ["'brokerUrl'", "'http'"], id="bad-scheme"),
    pytest.param({"qos": "3"}, ["'qos'", "0..2", "got 3"], id="qos-3"),
    pytest.param({"topic": "a/#/b"}, ["'topic'", "#"], id="bad-topic-filter"),
    pytest.param({"topics": "a,b"}, ["'topic'", "'topics'", "not both"], id="topic-and-topics"),
    pytest.param({"mqttVersion": "5"}, ["'mqttVersion'", "3.1.1"], id="mqtt-version-5"),
    pytest.param(
        {"maxMessagesPerTrigger": "0"}, ["'maxMessagesPerTrigger'", ">= 1"], id="max-per-trigger-0"
    ),
    pytest.param({"tls.caFile": "{ca}"}, ["tls.", "ssl://"], id="tls-on-tcp"),
    pytest.param({"password": "pw-no-user"}, ["'password'", "'username'"], id="password-no-user"),
    pytest.param({"partitionData": "disk"}, ["'partitionData'", "inline"], id="partition-data"),
]


@pytest.mark.parametrize(("change", "expected"), INVALID)
def test_invalid_option_fails_at_load_before_connecting(
    spark: SparkSession,
    tmp_path: Path,
    silent_listener: socket.socket,
    change: dict[str, str | None],
    expected: list[str],
) -> None:
    host, port = silent_listener.getsockname()
    ca = tmp_path / "ca.pem"
    ca.write_text("not used\n")
    wal = tmp_path / "wal"
    options: dict[str, str | None] = {
        "brokerUrl": f"tcp://{host}:{port}",
        "topic": "plant/#",
        "walPath": str(wal),
    }
    options.update(change)
    reader = spark.readStream.format("mqtt")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value.format(addr=f"{host}:{port}", ca=ca))
    with pytest.raises(Exception) as failure:
        reader.load()
    text = str(failure.value)
    assert "InvalidOptionError" in text, text
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in {text}"
    assert not connection_attempted(silent_listener), "a connection was attempted"
    assert not wal.exists(), "the WAL was created for an invalid query"


# ---------------------------------------------------------------------------- redaction


def files_containing(root: Path, secret: bytes) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``secret``."""
    return [p for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


def printed(action: object) -> str:
    """What calling ``action`` printed to stdout (``explain`` prints)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        action()  # type: ignore[operator]
    return out.getvalue()


def test_password_appears_in_no_plan_progress_error_or_file(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    broker = broker_factory(users={"ingest": secret})
    client_id = unique_id()
    dirs = StreamDirs.under(tmp_path / "good")
    frame = mqtt_reader(
        spark, broker.url, dirs.wal, topic="sec/#", clientId=client_id,
        username="ingest", password=secret, allowPasswordOverPlainTcp="true",
    ).load()  # fmt: skip
    texts = {"df.explain": printed(lambda: frame.explain(True))}
    query = to_delta(frame, dirs)
    try:
        wait_subscribed(broker, client_id, "sec/#", 1)
        messages = numbered("sec/t", 20)
        publish(broker, messages, username="ingest", password=secret)
        rows = wait_for_rows(spark, dirs.table, len(messages), [query])
        texts["query.explain"] = printed(lambda: query.explain(True))
        texts["lastProgress"] = query.lastProgress.json
        texts["recentProgress"] = "\n".join(p.json for p in query.recentProgress)
        texts["status"] = str(query.status)
    finally:
        query.stop()
    assert_exactly_once(rows, messages)
    assert "redacted" in texts["df.explain"], texts["df.explain"]  # the options are shown

    # A failing query: the secret sent for a user the broker does not know is refused.
    bad = StreamDirs.under(tmp_path / "bad")
    frame = mqtt_reader(
        spark, broker.url, bad.wal, topic="sec/#", clientId=unique_id(),
        username="nobody", password=secret, allowPasswordOverPlainTcp="true",
    ).load()  # fmt: skip
    failing = to_delta(frame, bad)
    try:
        with pytest.raises(StreamingQueryException) as failure:
            failing.awaitTermination(FAIL_TIMEOUT)
        error = failing.exception()
    finally:
        failing.stop()
    assert error is not None
    texts["exception"] = "\n".join([str(failure.value), str(error), repr(error)])
    assert "not authorized" in texts["exception"], texts["exception"]

    leaks = [name for name, text in texts.items() if secret in text]
    assert not leaks, f"the password shows in {leaks}"
    for root in (dirs.wal, dirs.checkpoint, dirs.table, bad.wal):
        assert root.is_dir(), root
    for root in (dirs.wal, dirs.checkpoint, dirs.table, bad.wal, bad.checkpoint):
        assert files_containing(root, secret.encode()) == [], root
