"""Several receivers (processes) for one query: exactly once into Delta with MQTT shared
subscriptions and with split filter lists, across a stop/restart and a SIGKILL of the source
process; a changed receiver count is refused; no receiver process outlives its query.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.publishing import Message, numbered, publish
from tests.support.spark_streams import (
    StreamDirs,
    assert_exactly_once,
    read_table,
    start_stream,
    wait_for_rows,
)
from tests.support.waiting import wait_subscribed, wait_until

EXIT_TIMEOUT = 30.0


def worker_pid(wal: Path, index: int) -> int:
    """The pid of the process holding shard ``index``'s WAL lock (its receiver process)."""
    text = (wal / f"shard-{index}" / "LOCK").read_text()
    return int(text.split()[0].removeprefix("pid="))


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone). A process that exits between the open
    and the read of its ``stat`` file raises ``ProcessLookupError``: gone as well."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def wait_gone(pids: Sequence[int], what: str) -> None:
    wait_until(
        lambda: not any(alive(p) for p in pids),
        EXIT_TIMEOUT,
        message=lambda: f"{what}: still running {[p for p in pids if alive(p)]}",
    )


def wait_workers(wal: Path, receivers: int) -> list[int]:
    """The receiver processes of a started query, once every shard holds its WAL lock."""

    def locked() -> bool:
        try:
            return all(alive(worker_pid(wal, i)) for i in range(receivers))
        except (FileNotFoundError, ValueError, IndexError):  # no lock yet, or being written
            return False

    wait_until(locked, 90.0, message=f"the receivers under {wal} did not start")
    return [worker_pid(wal, i) for i in range(receivers)]


def checkpoint_offsets(checkpoint: Path) -> dict:
    """The source offset of the last batch the checkpoint planned."""
    batches = sorted(int(n) for n in os.listdir(checkpoint / "offsets") if n.isdigit())
    lines = (checkpoint / "offsets" / str(batches[-1])).read_text().splitlines()
    return json.loads(lines[-1])


def assert_metadata(rows: Sequence[Row], messages: Sequence[Message], qos: int) -> None:
    """Topic, granted QoS and flags of every row match the message with its payload."""
    by_payload = {m.payload: m for m in messages}
    for row in rows:
        sent = by_payload[bytes(row["payload"])]
        assert row["topic"] == sent.topic, row
        assert row["qos"] == min(sent.qos, qos), row
        assert row["retained"] == sent.retain, row
        if row["qos"] == 0:
            assert row["messageId"] is None, row
        else:
            assert row["messageId"] is not None, row


def assert_shard_offsets(rows: Sequence[Row], offset: dict, receivers: int) -> None:
    """One sequence per shard: the checkpoint names ``receivers`` WALs, every shard took part,
    and the rows' offsets are exactly the union of the shards' ranges."""
    shards = offset["shards"]
    assert len(shards) == receivers and len({s["wal"] for s in shards}) == receivers, offset
    ends = [s["offset"] for s in shards]
    assert all(end > 0 for end in ends), f"a receiver got nothing: {offset}"
    expected = sorted((i, o) for i, end in enumerate(ends) for o in range(end))
    assert sorted((row["receiver"], row["offset"]) for row in rows) == expected


# ---------------------------------------------------------------------------- share


@pytest.mark.parametrize("version", ["3.1.1", "5"], ids=["v311", "v5"])
@pytest.mark.parametrize("qos", [1, 2], ids=["qos1", "qos2"])
def test_shared_subscription_receivers_deliver_exactly_once_across_a_restart(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, qos: int, version: str
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    options: dict[str, str | int] = {
        "topic": "shr/#", "qos": qos, "clientId": client_id, "receivers": 2,
        "mqttVersion": version,
    }  # fmt: skip
    retained = [Message("shr/state", b"retained-state", qos, retain=True)]
    publish(broker, retained)  # every member gets a copy on subscribe: stored once
    before = numbered("shr/a", 60, qos=qos, tag="before") + numbered("shr/b", 40, qos=1, tag="b")
    while_down = numbered("shr/a", 50, qos=qos, tag="down")
    after = numbered("shr/b", 30, qos=qos, tag="after")

    query = start_stream(spark, broker.url, dirs, **options)
    try:
        for index in range(2):
            wait_subscribed(broker, f"{client_id}-{index}", f"$share/{client_id}/shr/#", qos)
        workers = wait_workers(dirs.wal, 2)
        publish(broker, before)
        wait_for_rows(spark, dirs.table, len(retained + before), [query])
    finally:
        query.stop()
    wait_gone(workers, "receiver processes after query.stop()")

    # Queued by the broker in both members' persistent sessions, each its share.
    publish(broker, while_down)
    query = start_stream(spark, broker.url, dirs, **options)
    try:
        workers = wait_workers(dirs.wal, 2)
        publish(broker, after)
        expected = retained + before + while_down + after
        wait_for_rows(spark, dirs.table, len(expected), [query])
    finally:
        query.stop()
    wait_gone(workers, "receiver processes after the second query.stop()")

    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, expected)
    assert_metadata(rows, expected, qos)
    assert_shard_offsets(rows, checkpoint_offsets(dirs.checkpoint), 2)


# ---------------------------------------------------------------------------- topics


def test_topic_split_receivers_and_a_changed_receiver_count(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    filters = ["tpc/a/#", "tpc/b/#", "tpc/c/#"]
    options: dict[str, str | int] = {
        "topics": ",".join(filters), "qos": 1, "clientId": client_id,
        "receivers": 2, "shardBy": "topics",
    }  # fmt: skip
    messages = [m for name in "abc" for m in numbered(f"tpc/{name}/x", 25, tag=f"tp-{name}")]
    query = start_stream(spark, broker.url, dirs, **options)
    try:
        # Filter k goes to receiver k mod 2, and only there.
        for index, topic_filter in enumerate(filters):
            wait_subscribed(broker, f"{client_id}-{index % 2}", topic_filter, 1)
        workers = wait_workers(dirs.wal, 2)
        publish(broker, messages)
        wait_for_rows(spark, dirs.table, len(messages), [query])
    finally:
        query.stop()
    wait_gone(workers, "receiver processes after query.stop()")
    log = broker.log_text()
    assert f": {client_id}-1 1 tpc/a/#\n" not in log and f": {client_id}-0 1 tpc/b/#\n" not in log
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, messages)
    assert_metadata(rows, messages, 1)
    assert_shard_offsets(rows, checkpoint_offsets(dirs.checkpoint), 2)

    # The checkpoint holds two shard positions: three receivers, or one, must not start.
    for receivers, fragment in ((3, "'receivers' is 3"), (1, "'receivers' is 1")):
        changed = {**options, "receivers": receivers}
        if receivers == 1:
            del changed["shardBy"]
        query = start_stream(spark, broker.url, dirs, **changed)
        try:
            with pytest.raises(Exception) as failure:
                query.awaitTermination(120)
        finally:
            query.stop()
        text = str(failure.value)
        assert "written by a query with 2 receiver(s)" in text and fragment in text, text
        assert "new checkpoint" in text, text
    assert f" as {client_id}-2 (" not in broker.log_text(), "a third receiver connected"
    assert f" as {client_id} (" not in broker.log_text(), "a single receiver connected"
    assert len(read_table(spark, dirs.table)) == len(messages)


# ---------------------------------------------------------------------------- kill -9


@contextlib.contextmanager
def publishing(
    broker: MosquittoBroker, first: Sequence[Message], then: Sequence[Message]
) -> Iterator[threading.Event]:
    """Publish ``first`` in a background thread, then ``then`` once the yielded event is set."""
    go_on = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish(broker, first)
            if go_on.wait(timeout=300):
                publish(broker, then)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="publisher", daemon=True)
    thread.start()
    try:
        yield go_on
    finally:
        go_on.set()
        thread.join(timeout=120)
    assert not thread.is_alive(), "the publisher did not finish"
    assert not errors, errors


def test_sigkill_of_the_source_process_mid_ingest_then_restart_is_exactly_once(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    """SIGKILL the Spark process that runs the stream reader (the receivers' parent) while
    the WALs hold records not yet in the table: its receiver processes must go, and a
    restarted query lands every message exactly once, with what was published meanwhile.
    QoS 1 messages first, QoS 2 ones (pending ids in the WALs) around the kill."""
    qos = 2
    broker = broker_factory()
    client_id = unique_id("spark-")
    options: dict[str, str | int] = {
        "topic": "kil/#", "qos": qos, "clientId": client_id, "receivers": 2,
        "maxMessagesPerTrigger": 50,
    }  # fmt: skip
    first = numbered("kil/t", 60, qos=1, tag="first") + numbered("kil/t", 90, tag="mid", qos=2)
    then = numbered("kil/t", 100, qos=2, tag="then")
    query = start_stream(spark, broker.url, dirs, **options)
    try:
        for index in range(2):
            wait_subscribed(broker, f"{client_id}-{index}", f"$share/{client_id}/kil/#", qos)
        workers = wait_workers(dirs.wal, 2)
        runner = parent_of(workers[0])
        assert parent_of(workers[1]) == runner
        with publishing(broker, first, then) as killed:
            landed = wait_for_rows(spark, dirs.table, 50, [query])
            os.kill(runner, signal.SIGKILL)
            killed.set()
            assert len(landed) < len(first), "the kill was meant to land mid-ingest"
            wait_gone([runner, *workers], "the source process and its receivers after SIGKILL")
            with pytest.raises(Exception):  # noqa: B017 - the query fails, any type
                query.awaitTermination(120)
    finally:
        query.stop()

    query = start_stream(spark, broker.url, dirs, **options)
    try:
        wait_for_rows(spark, dirs.table, len(first + then), [query])
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, first + then)
    assert_metadata(rows, first + then, qos)
    assert_shard_offsets(rows, checkpoint_offsets(dirs.checkpoint), 2)


def test_invalid_shard_options_fail_at_load(spark: SparkSession, tmp_path: Path) -> None:
    def load(**options: str) -> str:
        reader = (
            spark.readStream.format("mqtt")
            .option("brokerUrl", "tcp://127.0.0.1:1")
            .option("topics", "a/#,b/#")
            .option("walPath", str(tmp_path / "wal"))
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception) as failure:
            reader.load()
        return str(failure.value)

    text = load(receivers="3", shardBy="topics")
    assert "'receivers' (3) must not exceed the number of filters in option 'topics'" in text
    text = load(receivers="2", mqttVersion="3.1")
    assert "'shardBy' share" in text and "needs option 'mqttVersion' 3.1.1" in text
    assert not (tmp_path / "wal").exists()
