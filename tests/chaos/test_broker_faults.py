"""The broker fails while messages flow: clean restarts with persistence, and hard kills
(``kill -9``: the broker rolls back to its last saved state).

Restarts: Mosquitto saves its persistence on SIGTERM, so everything it acknowledged to the
publisher survives; the query's receiver reconnects with backoff and the broker sends what
was queued or unacknowledged. A small backlog bound keeps part of each round queued in the
broker or in flight when it goes down.

Hard kills: what a broker loses in a crash is not ours to recover, so the test makes the
broker save its state (SIGUSR1) while the query's connection is stalled in the proxy, kills it
and starts it again: it comes back with exactly what it had acknowledged, and with any of our
acknowledgements that were held in the stalled connection forgotten, so it sends those
messages again. QoS 2 resends of pending ids are withheld; QoS 1 resends of messages whose
PUBACK the broker had not read (or saved), and the PUBLISH Mosquitto 2.0.11 resends after a
restart for exchanges whose PUBREL it had sent, are stored again and counted as possible
duplicates (docs/delivery.md): the extra rows must be exactly those.
"""

from __future__ import annotations

import logging
import random

import pytest
from pyspark.sql import SparkSession

from devtools.delta_log import delta_row_count
from devtools.fault_proxy import FaultProxy
from tests.chaos.harness import sized
from tests.chaos.streams import table_payloads, wait_for_every_message
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ledger import Ledger, LedgerPublisher, Tally, settle
from tests.support.spark_streams import StreamDirs, ensure_healthy, reported_delivery, start_stream
from tests.support.waiting import wait_subscribed, wait_until

log = logging.getLogger(__name__)

TOPIC = "chaos/brk/#"
ROUND = 150


@pytest.mark.timeout(1800)
def test_broker_restarts_and_hard_kills_during_ingest(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    proxy_to,
    dirs: StreamDirs,
    tally: Tally,
    ledger: Ledger,
    rng: random.Random,
) -> None:
    plan = ["restart"] * sized(ci=1, long=6) + ["hard-kill"] * sized(ci=1, long=4)
    rng.shuffle(plan)
    broker = broker_factory(persistence=True)
    proxy: FaultProxy = proxy_to(broker)
    client_id = unique_id("brk-")
    query = start_stream(
        spark, proxy.url, dirs, topic=TOPIC, qos=2, clientId=client_id,
        maxBacklogMessages=20, keepAlive=5, connectTimeout=2,
    )  # fmt: skip
    pending_at_fault = []
    try:
        wait_subscribed(broker, client_id, TOPIC, 2)
        for kind in plan:
            # The previous round is in the table before the next one is published.
            wait_for_every_message(spark, dirs.table, ledger, [query], timeout=180)
            connects = broker.log_text().count(f" as {client_id} (")
            publisher = LedgerPublisher(broker.host, broker.port, "chaos/brk/t", ledger)
            try:
                publisher.publish(ROUND)
            finally:
                publisher.close()
            pending_at_fault.append(len(ledger.published) - delta_row_count(dirs.table))
            log.info("%s with %d messages not yet in the table", kind, pending_at_fault[-1])
            if kind == "restart":
                broker.restart()  # SIGTERM: Mosquitto saves its persistence first
                tally.add("broker_restarts")
            else:
                # Nothing passes between the query and the broker from here until the broker
                # is back, so the saved state is the state the broker restarts with.
                proxy.stall(new_connections=True)
                broker.save_persistence()
                broker.kill()
                broker.start()
                proxy.resume()
                tally.add("broker_hard_kills")
                tally.add("broker_restarts")

            def reconnected(n: int = connects) -> bool:
                return broker.log_text().count(f" as {client_id} (") > n

            wait_until(
                reconnected,
                60,
                message="the receiver did not reconnect after the broker came back",
            )
            ensure_healthy([query])
        wait_for_every_message(spark, dirs.table, ledger, [query], timeout=180)
    finally:
        query.stop()
        tally.add_proxy(proxy)
    print(f"faults {plan}; messages pending at each: {pending_at_fault}")
    assert max(pending_at_fault) > 0, "no fault landed while messages were pending"
    settle(
        tally,
        ledger,
        table_payloads(spark, dirs.table),
        reported_delivery(query)["possibleDuplicates"],
    )
