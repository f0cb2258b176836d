"""``format("mqtt")`` with ``payloadFormat`` ``sparkplug`` into Delta: real Mosquitto, real Spark,
a real edge node process whose Will is its NDEATH.

Births and alias-only data share micro-batches and are cut into partitions of two records; the
query is stopped and started again, and the data after the restart carries aliases only (no new
birth): every metric must be resolved, once, with the value sent. Then the edge node rebirths with
other aliases and is killed with SIGKILL, so the broker publishes its Will NDEATH. The table
must hold the rows the pure decoder gives for the same messages in one uninterrupted pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

from pyspark.sql import Row, SparkSession

from connector.spark.reader.sparkplug_plan import STATE_FILE
from connector.sparkplug.messages import Message as Stored
from connector.sparkplug.messages import decode_messages
from connector.sparkplug.state import SparkplugState
from connector.wal.opening import read_sidecar
from devtools.sparkplug_payloads import birth, data, death, row_key
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.publishing import Message, publish
from tests.support.spark_streams import StreamDirs, mqtt_reader, to_delta, wait_for_rows
from tests.support.waiting import wait_subscribed, wait_until

GROUP, NODE = "plant", "edge1"
N = f"spBv1.0/{GROUP}/{{}}/{NODE}"
D = f"spBv1.0/{GROUP}/{{}}/{NODE}/pump"

# NBIRTH bdSeq 0: temp (alias 1, Double), count (alias 2, Int32); DBIRTH: rpm (alias 3, Int16).
NBIRTH_0 = birth([("temp", 1, 10, "double_value", 20.0), ("count", 2, 3, "int_value", 0)], 0)
DBIRTH = birth([("rpm", 3, 2, "int_value", 0)], bd_seq=-1, seq=1)
# The rebirth (bdSeq 1) swaps the aliases: count is 1 now, temp 2.
NBIRTH_1 = birth([("count", 1, 3, "int_value", 0), ("temp", 2, 10, "double_value", 0.0)], 1)

EDGE_NODE = """
import sys, time
import paho.mqtt.client as mqtt
host, port, will, birth, data = sys.argv[1], int(sys.argv[2]), *map(bytes.fromhex, sys.argv[3:6])
client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="edge1-node", clean_session=True)
client.will_set("spBv1.0/plant/NDEATH/edge1", will, qos=1, retain=False)
client.connect(host, port, keepalive=60)
client.loop_start()
client.publish("spBv1.0/plant/NBIRTH/edge1", birth, qos=0).wait_for_publish(10)
client.publish("spBv1.0/plant/NDATA/edge1", data, qos=0).wait_for_publish(10)
print("published", flush=True)
time.sleep(600)
"""
"""An edge node: connects with its NDEATH as the Will (Sparkplug 3.0 section 7.1), births,
sends one DATA, and waits to be killed."""


def _phase_one() -> list[Message]:
    """Births, then alias-only data of the node and the device (Int32 -seq, Int16 -seq)."""
    out = [Message(N.format("NBIRTH"), NBIRTH_0, 0), Message(D.format("DBIRTH"), DBIRTH, 0)]
    for seq in range(2, 14):
        if seq % 3:
            body = data([(1, "double_value", seq + 0.5), (2, "int_value", -seq & 0xFFFFFFFF)], seq)
            out.append(Message(N.format("NDATA"), body, 0))
        else:
            out.append(Message(D.format("DDATA"), data([(3, "int_value", -seq & 0xFFFF)], seq), 0))
    return out


def _phase_two() -> list[Message]:
    """After the restart: alias-only data again, no birth; and a stale NDEATH (bdSeq 7)."""
    out = [
        Message(N.format("NDATA"), data([(2, "int_value", 100 + seq)], seq), 0)
        for seq in range(14, 20)
    ]
    out.append(Message(D.format("DDATA"), data([(3, "int_value", 5)], 20), 0))
    out.append(Message(N.format("NDEATH"), death(7), 1))
    return out


def _reader_options(client_id: str) -> dict[str, Any]:
    return {
        "topic": "spBv1.0/#",
        "qos": 1,
        "clientId": client_id,
        "payloadFormat": "sparkplug",
        "maxMessagesPerTrigger": 5,
        "recordsPerPartition": 2,
    }


def _start(spark: SparkSession, broker: MosquittoBroker, dirs: StreamDirs, client_id: str) -> Any:
    frame = mqtt_reader(spark, broker.url, dirs.wal, **_reader_options(client_id)).load()
    return to_delta(frame, dirs)


def _metric_rows(messages: list[Message]) -> int:
    """How many rows the decoder makes of ``messages`` (one per metric, one for none)."""
    return len(decode_messages(_stored(messages), SparkplugState()))


def _stored(messages: list[Message]) -> list[Stored]:
    return [Stored(m.topic, m.payload, 0, 1_000 * i, i) for i, m in enumerate(messages)]


def _projection(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(row_key(r.__getitem__) for r in rows)


def _edge_node(broker: MosquittoBroker) -> subprocess.Popen[str]:
    nddata = data([(1, "int_value", 42), (2, "double_value", 99.5)], 1)
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            EDGE_NODE,
            broker.host,
            str(broker.port),
            death(1).hex(),
            NBIRTH_1.hex(),
            nddata.hex(),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_sparkplug_metrics_resolve_across_batches_restarts_rebirths_and_a_will(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    one, two = _phase_one(), _phase_two()
    query = _start(spark, broker, dirs, client_id)
    try:
        wait_subscribed(broker, client_id, "spBv1.0/#", 1)
        publish(broker, one)
        wait_for_rows(spark, dirs.table, _metric_rows(one), [query])
    finally:
        query.stop()
    stored = read_sidecar(str(dirs.wal), STATE_FILE)
    assert stored is not None, "no Sparkplug state was stored at the commit"
    record = json.loads(stored)
    # Spark commits a batch to its source when it plans the next, so the last may be missing.
    assert 0 < record["offset"] <= len(one)
    assert record["state"]["nodes"][0][0] == [GROUP, NODE]

    query = _start(spark, broker, dirs, client_id)
    node = None
    try:
        # The session persists (Session Present): no new SUBSCRIBE, so wait for the CONNECT.
        wait_until(
            lambda: broker.log_text().count(f" as {client_id} (") >= 2,
            60,
            interval=0.05,
            message=f"{client_id} did not connect again",
        )
        publish(broker, two)
        wait_for_rows(spark, dirs.table, _metric_rows(one + two), [query])
        node = _edge_node(broker)
        assert node.stdout is not None
        assert node.stdout.readline().strip() == "published"
        os.killpg(node.pid, signal.SIGKILL)  # no DISCONNECT: the broker publishes the Will
        node.wait(10)
        will = Message(N.format("NDEATH"), death(1), 1)
        rebirth = [
            Message(N.format("NBIRTH"), NBIRTH_1, 0),
            Message(N.format("NDATA"), data([(1, "int_value", 42), (2, "double_value", 99.5)], 1)),
            will,
        ]
        everything = one + two + rebirth
        rows = wait_for_rows(spark, dirs.table, _metric_rows(everything), [query])
    finally:
        query.stop()
        if node is not None and node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)

    table = [r.asDict() for r in rows]
    keys = Counter((r["receiver"], r["offset"], r["metric_index"]) for r in table)
    assert max(keys.values()) == 1, "a metric landed twice"
    expected = [
        dict(zip(row_keys, values, strict=True)) for row_keys, values in _decoded_rows(everything)
    ]
    assert _projection(table) == _projection(expected)
    data_rows = [r for r in table if r["message_type"] in ("NDATA", "DDATA")]
    assert data_rows and all(r["metric_name"] is not None for r in data_rows)
    assert all(r["reason"] is None for r in data_rows)
    restart = [r for r in data_rows if r["seq"] in range(14, 20)]
    assert sorted(r["long_value"] for r in restart) == list(range(114, 120))
    assert {r["metric_name"] for r in restart} == {"count"}
    swapped = [r for r in data_rows if r["bd_seq"] == 1]
    assert {(r["metric_name"], r["long_value"], r["double_value"]) for r in swapped} == {
        ("count", 42, None),
        ("temp", None, 99.5),
    }
    deaths = sorted(
        (r["bd_seq"], r["death_matched"]) for r in table if r["message_type"] == "NDEATH"
    )
    assert deaths == [(1, True), (7, False)]
    assert all(r["event"] for r in table if r["message_type"] == "NDEATH")
    _check_types(rows)


def _decoded_rows(messages: list[Message]) -> list[tuple[tuple[str, ...], tuple[Any, ...]]]:
    rows = decode_messages(_stored(messages), SparkplugState())
    names = tuple(rows.columns)
    return [(names, tuple(rows.columns[n][i] for n in names)) for i in range(len(rows))]


def _check_types(rows: list[Row]) -> None:
    """Int32 and Int16 values came negative through unsigned fields; Spark holds them signed."""
    negative = [
        r for r in rows if r["metric_name"] in ("count", "rpm") and r["seq"] in range(2, 14)
    ]
    assert negative and all(r["long_value"] == -r["seq"] for r in negative)
    assert {r["datatype"] for r in negative} == {"Int32", "Int16"}
