"""Option validation at ``load()`` before any connection. (The password kept out of every
place a query leaves text is tested in ``test_source_security.py``.)
"""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from devtools.broker_process import free_port
from tests.support.brokers import LOOPBACK, BrokerFactory
from tests.support.waiting import wait_until


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
    pytest.param({"mqttVersion": "6"}, ["'mqttVersion'", "3.1.1", "5"], id="mqtt-version-6"),
    pytest.param(
        {"receiveMaximum": "10"}, ["'receiveMaximum'", "'mqttVersion' 5"], id="v5-option-on-3.1.1"
    ),
    pytest.param(
        {"mqttVersion": "5", "topicAliasMaximum": "65536"},
        ["'topicAliasMaximum'", "0..65535"],
        id="topic-alias-maximum-range",
    ),
    pytest.param(
        {"maxMessagesPerTrigger": "0"}, ["'maxMessagesPerTrigger'", ">= 1"], id="max-per-trigger-0"
    ),
    pytest.param({"tls.caFile": "{ca}"}, ["tls.", "ssl://"], id="tls-on-tcp"),
    pytest.param({"password": "pw-no-user"}, ["'password'", "'username'"], id="password-no-user"),
    pytest.param({"partitionData": "disk"}, ["'partitionData'", "inline"], id="partition-data"),
    pytest.param(
        {"wal_path": "/tmp/x"}, ["unknown option 'wal_path'", "'walPath'"], id="misspelt-walPath"
    ),
    pytest.param(
        {"keepalive_seconds": "30"},
        ["unknown option 'keepalive_seconds'", "'keepAlive'"],
        id="misspelt-keepAlive",
    ),
    pytest.param({"brokerUrl": "{addr}"}, ["'brokerUrl'", "has no scheme"], id="no-scheme"),
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
    first = text.splitlines()[0]
    # The product's message on the first line, after Spark's prefix, with no traceback.
    assert first.startswith("[PYTHON_DATA_SOURCE_ERROR] "), text
    assert "InvalidOptionError: " in first and "Traceback" not in text, text
    for fragment in expected:
        assert fragment in first, f"{fragment!r} not in {first}"
    assert not connection_attempted(silent_listener), "a connection was attempted"
    assert not wal.exists(), "the WAL was created for an invalid query"


def test_the_keys_spark_passes_itself_are_taken(
    spark: SparkSession, tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    """``load(path)``, ``start(path)``, ``checkpointLocation`` and ``queryName`` reach the
    source's and the writer's options from Spark itself (``SPARK_KEYS``): none is refused. The
    streaming writer reads its options with its first batch, so one batch must land."""
    broker = broker_factory()
    frame = (
        spark.readStream.format("mqtt")
        .option("brokerUrl", broker.url)
        .option("topic", "plant/#")
        .option("walPath", str(tmp_path / "wal"))
        .load(str(tmp_path / "some-path"))
    )
    assert "payload" in frame.columns
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "5")
        .load()
        .selectExpr("CAST(value AS STRING) AS payload")
        .writeStream.format("mqtt")
        .option("brokerUrl", broker.url)
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .queryName("spark-keys")
        .trigger(processingTime="200 milliseconds")
        .start(str(tmp_path / "sink-path"))
    )
    try:
        wait_until(
            lambda: (
                query.exception() is None and any(p["numInputRows"] for p in query.recentProgress)
            ),
            120,
            message=lambda: f"no batch written: {query.exception()}",
        )
    finally:
        query.stop()


def test_an_unreachable_broker_fails_the_query_with_its_one_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A runtime error that is the user's (here: nothing listens at the broker's address)
    reaches ``awaitTermination`` with the product's message on its first line, no traceback."""
    port = free_port()
    query = (
        spark.readStream.format("mqtt")
        .option("brokerUrl", f"tcp://{LOOPBACK}:{port}")
        .option("topic", "plant/#")
        .option("walPath", str(tmp_path / "wal"))
        .option("connectTimeout", "2")
        .load()
        .writeStream.format("memory")
        .queryName("unreachable")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(120)
    finally:
        query.stop()
    text = str(failure.value)
    first = text.splitlines()[0]
    assert f"BrokerUnreachable: cannot connect to tcp://{LOOPBACK}:{port}" in first, text
    assert "Traceback" not in text, text
