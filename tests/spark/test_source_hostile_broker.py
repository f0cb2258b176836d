"""``format("mqtt")`` against a scripted broker that breaks the protocol.

One violation: the receiver drops the connection, reconnects, and the query goes on; every
message lands exactly once, including those of the read the violation spoiled (nothing of it
was acknowledged, so the broker sends it again). A broker that violates on every connection
with no message in between: the query fails with an error naming the broker and the rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tests.support.hostile_broker import QueueBroker
from tests.support.ids import unique_id
from tests.support.publishing import Message
from tests.support.spark_streams import (
    StreamDirs,
    assert_exactly_once,
    assert_gap_free,
    start_stream,
    wait_for_rows,
)

FAIL_TIMEOUT = 120.0
BAD_FRAME = bytes.fromhex("30 04 00 02 C3 28")  # PUBLISH topic that is not UTF-8


def test_one_violation_loses_nothing_and_the_query_keeps_running(
    spark: SparkSession, dirs: StreamDirs
) -> None:
    topic = "hostile/t"
    messages = [Message(topic, f"h-{n}".encode()) for n in range(20)]

    def plan(number: int, send: Callable[..., None], wait_acked: Callable[..., bool]) -> None:
        if number == 1:
            send(list(range(10)))
            if wait_acked(list(range(10))):
                # Three more and a bad frame in one write: the whole read is dropped unacked.
                send([10, 11, 12], BAD_FRAME)
        else:
            send(broker.unacked())

    broker = QueueBroker([(m.topic, m.payload) for m in messages], plan)
    query = start_stream(spark, broker.url, dirs, topic="hostile/#", clientId=unique_id("spark-"))
    try:
        rows = wait_for_rows(spark, dirs.table, len(messages), [query])
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
        broker.close()
    assert_exactly_once(rows, messages)
    assert_gap_free(rows)
    assert broker.connections == 2, "one reconnect after the violation"
    redelivered = [r for r in rows if bytes(r["payload"]) in (b"h-10", b"h-11", b"h-12")]
    assert all(r["duplicate"] for r in redelivered), redelivered  # sent again with DUP=1


def test_a_broker_that_keeps_violating_fails_the_query_clearly(
    spark: SparkSession, dirs: StreamDirs
) -> None:
    def plan(number: int, send: Callable[..., None], wait_acked: Callable[..., bool]) -> None:
        time.sleep(0.2)  # after SUBACK's read, so that connecting itself succeeds
        send([], BAD_FRAME)

    broker = QueueBroker([], plan)
    query = start_stream(spark, broker.url, dirs, topic="hostile/#", clientId=unique_id("spark-"))
    try:
        with pytest.raises(StreamingQueryException) as failure:
            # pyspark types awaitTermination's timeout int; it takes seconds as a float
            query.awaitTermination(FAIL_TIMEOUT)  # type: ignore[arg-type]
        error = str(failure.value)
    finally:
        query.stop()
        broker.close()
    assert f"{broker.url} broke the MQTT protocol 5 times in a row" in error, error
    assert "not well-formed UTF-8 (section 1.5.3)" in error, error
    assert broker.connections == 5
