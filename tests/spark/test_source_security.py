"""Security of ``format("mqtt")`` end to end: TLS with a password, the password nowhere to be
found afterwards, a password over plain TCP refused before any connection, the WAL owner-only.

After a query over TLS with a known password and a query refused for a wrong one, the
passwords are searched for in: the log output of this process, of the Spark JVM and of the
Python workers that run the receiver (everything written to stdout and stderr), the exception
messages, the query progress JSON and status, ``explain()`` of the frame and of the query, and
every file under the WAL, checkpoint and table directories.
"""

from __future__ import annotations

import contextlib
import io
import logging
import select
import socket
import stat
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tests.support.brokers import BrokerFactory, MosquittoBroker, Pki
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import (
    StreamDirs,
    assert_exactly_once,
    mqtt_reader,
    to_delta,
    wait_for_rows,
)
from tests.support.waiting import wait_subscribed

FAIL_TIMEOUT = 120.0


def printed(action: Callable[[], object]) -> str:
    """What ``action`` printed to stdout (``explain`` prints)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        action()
    return out.getvalue()


def process_output(request: pytest.FixtureRequest) -> str:
    """Everything written to fds 1 and 2 since the last call, by this process and its children
    (the Spark JVM and its Python workers inherit them). Written back, so a failure shows it."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is None or not capman.is_globally_capturing():
        pytest.fail("this test reads the process output: run it without -s / --capture=no")
    out, err = capman.read_global_capture()
    sys.stdout.write(out)
    sys.stderr.write(err)
    return out + err


def files_containing(root: Path, secrets: list[bytes]) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and any(secret in path.read_bytes() for secret in secrets)
    ]


def assert_owner_only(wal: Path) -> None:
    modes = {str(p): stat.S_IMODE(p.stat().st_mode) for p in [wal, *wal.rglob("*")]}
    assert modes[str(wal)] == 0o700, oct(modes[str(wal)])
    loose = {path: oct(mode) for path, mode in modes.items() if mode & 0o077}
    assert not loose, f"WAL files readable by group or others: {loose}"
    assert len(modes) > 3, modes  # segments, index, identity, lock, subscriptions


@pytest.fixture
def tls_password_broker(broker_factory: BrokerFactory, pki: Pki) -> tuple[MosquittoBroker, str]:
    secret = f"pw-{uuid.uuid4().hex}"
    return broker_factory(users={"ingest": secret}, tls=pki.server_tls()), secret


def test_password_over_tls_leaks_nowhere_and_the_wal_is_owner_only(
    spark: SparkSession,
    tls_password_broker: tuple[MosquittoBroker, str],
    pki: Pki,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker, secret = tls_password_broker
    wrong = f"wrong-{uuid.uuid4().hex}"
    secrets = [secret, wrong]
    url = f"ssl://localhost:{broker.tls_port}"
    texts: dict[str, str] = {}
    caplog.set_level(logging.DEBUG)
    process_output(request)  # start from here

    good = StreamDirs.under(tmp_path / "good")
    client_id = unique_id("spark-")
    frame = mqtt_reader(
        spark, url, good.wal, topic="sec/#", clientId=client_id,
        username="ingest", password=secret, **{"tls.caFile": str(pki.ca_cert)},
    ).load()  # fmt: skip
    texts["df.explain"] = printed(lambda: frame.explain(True))
    query = to_delta(frame, good)
    try:
        wait_subscribed(broker, client_id, "sec/#", 1)
        messages = numbered("sec/t", 20)
        publish(broker, messages, username="ingest", password=secret)
        rows = wait_for_rows(spark, good.table, len(messages), [query])
        texts["query.explain"] = printed(lambda: query.explain(True))
        last = query.lastProgress
        assert last is not None
        texts["lastProgress"] = last.json
        texts["recentProgress"] = "\n".join(p.json for p in query.recentProgress)
        texts["status"] = str(query.status)
    finally:
        query.stop()
    assert_exactly_once(rows, messages)
    assert "redacted" in texts["df.explain"], texts["df.explain"]  # the options are shown

    bad = StreamDirs.under(tmp_path / "bad")
    failing = to_delta(
        mqtt_reader(
            spark, url, bad.wal, topic="sec/#", clientId=unique_id("spark-"),
            username="ingest", password=wrong, **{"tls.caFile": str(pki.ca_cert)},
        ).load(),
        bad,
    )  # fmt: skip
    try:
        with pytest.raises(StreamingQueryException) as failure:
            # pyspark types awaitTermination's timeout int; it takes seconds as a float
            failing.awaitTermination(FAIL_TIMEOUT)  # type: ignore[arg-type]
        error = failing.exception()
    finally:
        failing.stop()
    assert error is not None
    texts["exception"] = "\n".join(
        [str(failure.value), str(error), repr(error), str(getattr(error, "stackTrace", ""))]
    )
    assert "not authorized" in texts["exception"], texts["exception"]

    texts["process output"] = process_output(request)
    # py4j's DEBUG logger echoes every command sent to the JVM, the option values the caller
    # passed included: it is the caller's own call, at a level never on in production. Every
    # other logger, and py4j from INFO up, must not show the password.
    texts["log records"] = "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {r.exc_text or ''}"
        for r in caplog.records
        if not (r.name.startswith("py4j") and r.levelno < logging.INFO)
    )
    assert any(r.name.startswith("connector") for r in caplog.records) or texts["process output"]
    assert "not authorized" in texts["process output"] + texts["log records"]  # logs were seen
    leaks = [name for name, text in texts.items() if any(s in text for s in secrets)]
    assert not leaks, f"a password shows in {leaks}"
    for root in (good.wal, good.checkpoint, good.table, bad.wal, bad.checkpoint):
        assert root.is_dir(), root
        assert files_containing(root, [s.encode() for s in secrets]) == [], root
    assert_owner_only(good.wal)
    assert_owner_only(bad.wal)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_password_over_plain_tcp_is_refused_before_connecting(
    spark: SparkSession, tmp_path: Path, host: str
) -> None:
    """Loopback included: the error says how to opt in or to use TLS, and nothing connects."""
    with socket.create_server(("127.0.0.1", 0)) as listener:  # listens, never accepts
        port = listener.getsockname()[1]
        reader = mqtt_reader(
            spark, f"tcp://{host}:{port}", tmp_path / "wal", topic="a/#",
            username="ingest", password="pw-plain",
        )  # fmt: skip
        with pytest.raises(Exception) as refused:
            reader.load()
        attempted, _, _ = select.select([listener], [], [], 0)
    text = str(refused.value)
    assert "InvalidOptionError" in text and "unencrypted" in text, text
    assert "'allowPasswordOverPlainTcp' to true" in text and "ssl://" in text, text
    assert "pw-plain" not in text
    assert not attempted, "a connection was attempted"  # a loopback connect() queues at once
    assert not (tmp_path / "wal").exists()
