"""``format("mqtt")`` behind the chaos proxy while messages flow: connections cut, stalled
(half-open: keep-alive must notice), fed in byte-sized fragments, spoiled by a malformed
frame, and a broker that stops answering CONNECT for a while. The query keeps running
through all of it and every message lands: QoS 2 exactly once; QoS 1 at least once, every
extra copy a broker resend (DUP=1) of a message whose PUBACK a cut or a half-open link kept
from the broker (at least once by the standard, section 4.3.2; docs/delivery.md; replayed
deterministically in ``tests/integration/test_receiver_resends.py``).

The publisher talks to the broker directly; only the query's connection goes through the
proxy. Faults follow one another in an order drawn from the test's seed.
"""

from __future__ import annotations

import logging
import random

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from devtools.fault_proxy import FaultProxy
from tests.chaos.driver_kills import table_rows
from tests.chaos.harness import sized
from tests.chaos.streams import wait_for_every_message
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ledger import (
    BackgroundTraffic,
    Ledger,
    LedgerPublisher,
    Tally,
    describe,
    ledgers_per_qos,
    settle_per_qos,
)
from tests.support.spark_streams import StreamDirs, ensure_healthy, start_stream, wait_for_rows
from tests.support.waiting import wait_subscribed, wait_until

log = logging.getLogger(__name__)

TOPIC = "chaos/net/#"
KEEP_ALIVE = 2
FAULTS = ("cut", "stall", "fragment", "malformed", "no-connack")
BAD_FRAMES = (
    bytes([0x36, 0x05, 0x00, 0x01, 0x61, 0x00, 0x01]),  # PUBLISH with QoS 3 (3.3.1.2)
    bytes([0x32, 0x05, 0x00, 0x01, 0x61, 0x00, 0x00]),  # QoS 1 with packet id 0 (2.3.1)
    bytes([0x30, 0x04, 0x00, 0x02, 0xC3, 0x28]),  # topic that is not UTF-8 (1.5.3)
)


@pytest.mark.timeout(1800)
def test_cuts_stalls_fragments_and_malformed_frames_during_ingest(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    proxy_to,
    dirs: StreamDirs,
    tally: Tally,
    ledger: Ledger,
    rng: random.Random,
) -> None:
    rounds = sized(ci=1, long=4)
    broker = broker_factory()
    proxy: FaultProxy = proxy_to(broker)
    client_id = unique_id("net-")
    query = start_stream(
        spark, proxy.url, dirs, topic=TOPIC, qos=2, clientId=client_id,
        keepAlive=KEEP_ALIVE, connectTimeout=1,
    )  # fmt: skip
    publisher = LedgerPublisher(broker.host, broker.port, "chaos/net/t", ledger)
    traffic = BackgroundTraffic(publisher, count=10**6, rate=40.0)
    plan = [fault for _ in range(rounds) for fault in rng.sample(FAULTS, len(FAULTS))]
    try:
        wait_subscribed(broker, client_id, TOPIC, 2)
        traffic.start()
        before_last = 0
        for fault in plan:
            # Each fault starts once the query has ingested what was published before the
            # previous one, and while new messages flow.
            wait_for_rows(spark, dirs.table, before_last, [query])

            def flowing(n: int = before_last) -> bool:
                return len(ledger.published) >= n + 40

            wait_until(flowing, 60)
            before_last = len(ledger.published)
            # A connection left from a blackhole round may still be open and not forwarding.
            wait_until(
                lambda: proxy.forwarding_links >= 1, 60, message="the receiver is not connected"
            )
            connects = broker.log_text().count(f" as {client_id} (")

            def reconnected(n: int = connects) -> bool:
                return broker.log_text().count(f" as {client_id} (") > n

            log.info("fault %s after %d messages", fault, len(ledger.published))
            if fault == "cut":
                assert proxy.cut() >= 1
            elif fault == "stall":
                assert proxy.stall() >= 1
                # Keep-alive gives the half-open connection up (1.5 x keepAlive) and the
                # receiver connects again through the proxy (new connections flow).
                wait_until(
                    reconnected,
                    6 * KEEP_ALIVE + 10,
                    message="the stalled connection was never replaced",
                )
                proxy.resume()
            elif fault == "fragment":
                proxy.fragment(rng.choice([1, 2, 3]))
                proxy.cut()  # the next connection is fragmented from CONNECT on
                wait_for_rows(spark, dirs.table, before_last + 20, [query])
                proxy.fragment(None)
            elif fault == "malformed":
                frame = rng.choice(BAD_FRAMES)
                injected = proxy.stats.malformed_frames

                def delivered(f: bytes = frame, n: int = injected) -> bool:
                    if proxy.stats.malformed_frames > n:
                        return True
                    # Armed (again) on whichever connection is current, should the armed
                    # one close before a PUBLISH passed through it.
                    proxy.inject(f)
                    return False

                wait_until(delivered, 30, message="no PUBLISH carried the malformed frame")
                wait_until(
                    reconnected,
                    30,
                    message="the malformed frame did not make the receiver reconnect",
                )
            else:
                # A broker that takes the connection and never answers CONNECT: attempts
                # time out (connectTimeout=1) and back off; the query stays up.
                blackholed = proxy.stats.blackholed
                proxy.blackhole(True)
                proxy.cut()

                def attempts_blackholed(n: int = blackholed) -> bool:
                    return proxy.stats.blackholed >= n + 2

                wait_until(attempts_blackholed, 30)
                ensure_healthy([query])
                proxy.blackhole(False)
            ensure_healthy([query])
        traffic.stop()
        traffic.finish()
        wait_for_every_message(spark, dirs.table, ledger, [query], timeout=180)
    finally:
        traffic.stop()
        query.stop()
        publisher.close()
        tally.add_proxy(proxy)
    verdicts = settle_per_qos(tally, ledgers_per_qos(ledger), table_rows(dirs.table))
    print(f"faults: {plan}; proxy {proxy.stats}; {describe(verdicts)}")


def test_a_broker_that_never_sends_connack_fails_the_query_start_clearly(
    spark: SparkSession, broker_factory: BrokerFactory, proxy_to, dirs: StreamDirs, tally: Tally
) -> None:
    broker = broker_factory()
    proxy: FaultProxy = proxy_to(broker)
    proxy.blackhole(True)
    query = start_stream(
        spark, proxy.url, dirs, topic=TOPIC, clientId=unique_id("nc-"), connectTimeout=1
    )
    try:
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(120)
    finally:
        query.stop()
        tally.add_proxy(proxy)
    text = str(failure.value)
    assert f"{proxy.url} did not answer with CONNACK within 1.0 s" in text, text
