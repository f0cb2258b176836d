"""mochi-mqtt's in-flight window (`-inflight-v311 N`, tools/mochi-broker/window.go): a broker
that, as Mosquitto 2.0.12+ and EMQX do, keeps at most N unacknowledged QoS 1/2 messages per
MQTT 3.1.1 client, and at most its Receive Maximum per MQTT 5 client, a resumed session's
backlog included (bench/flow_control.py drains through it).

A client of ours resumes a persistent session holding a backlog many windows long and
acknowledges only once it holds a whole window: every batch between two acknowledgements must
be exactly the window (the last one the rest), never more in flight than the window after any
socket read, in the order published; at QoS 2 no new message may come before the PUBCOMPs.
The broker's own count (the `in-flight window closed` log line) must show the window reached.
Without the flag mochi 2.7.9 sends such a backlog at once, whatever the client's version.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.packets import ProtocolLevel, Publish
from devtools.backlog import publish_windowed
from devtools.interop_brokers import MochiBroker, WindowClosed
from tests.support.waiting import wait_until

MochiFactory = Callable[..., MochiBroker]
TIMEOUT = 30.0
FILTER = "window/+/data"
TOPICS = ("window/a/data", "window/b/data", "window/c/data")


def message(seq: int) -> tuple[str, bytes]:
    """The backlog's message ``seq``: three topics in turn (so that MQTT 5 sessions get topic
    aliases), the sequence number first in the payload."""
    return TOPICS[seq % len(TOPICS)], b"%010d:" % seq + b"x" * 40


def config(
    client_id: str,
    level: ProtocolLevel,
    receive_maximum: int | None,
    topic_alias_maximum: int | None = None,
) -> SessionConfig:
    return SessionConfig(
        client_id,
        clean_session=False,
        level=level,
        receive_maximum=receive_maximum,
        topic_alias_maximum=topic_alias_maximum,
    )


def make_backlog(broker: MochiBroker, session: SessionConfig, qos: int, count: int) -> MqttClient:
    """Create the persistent session, publish ``count`` messages while it is offline, and
    return a client (not connected) that resumes it."""
    creator = MqttClient(broker.url, session, [(FILTER, qos)])
    assert not creator.connect().session_present
    creator.disconnect()
    publish_windowed(broker.url, count, message, TIMEOUT, qos=qos)
    return MqttClient(broker.url, session, [(FILTER, qos)])


def drain_in_windows(
    client: MqttClient, total: int, window: int, qos: int
) -> tuple[list[int], list[Publish]]:
    """Acknowledge only whole windows (the last batch: what is left): returns the batch sizes
    and the messages in arrival order. Fails as soon as a read leaves more than ``window``
    messages unacknowledged, or, at QoS 2, a message comes before the batch's PUBCOMPs."""
    deadline = time.monotonic() + TIMEOUT
    batches: list[int] = []
    received: list[Publish] = []
    while len(received) < total:
        want = min(window, total - len(received))
        held: list[Publish] = []
        while len(held) < want:
            assert time.monotonic() < deadline, f"stalled at {len(received) + len(held)}/{total}"
            read = client.poll(0.2)
            held += read.messages
            assert not read.released
            assert len(held) <= window, (
                f"{len(held)} messages unacknowledged after one read, window {window}"
            )
        client.acknowledge(held)
        if qos == 2:
            released: list[int] = []
            while len(released) < len(held):
                assert time.monotonic() < deadline, "PUBRELs missing"
                read = client.poll(0.2)
                assert not read.messages, "a message came before the PUBCOMPs of a full window"
                released += read.released
            client.acknowledge([], released)
        batches.append(len(held))
        received += held
    return batches, received


def closed_windows(broker: MochiBroker, client_id: str, count: int) -> list[WindowClosed]:
    """The broker's `in-flight window closed` lines of the client, once there are ``count``."""

    def enough() -> list[WindowClosed] | None:
        found = broker.windows_closed(client_id)
        return found if found and len(found) >= count else None

    return wait_until(
        enough,
        TIMEOUT,
        message=lambda: f"mochi logged {broker.windows_closed(client_id)} for {client_id}",
    )


def expected_batches(total: int, window: int) -> list[int]:
    return [window] * (total // window) + ([total % window] if total % window else [])


def sequence(messages: list[Publish]) -> list[int]:
    return [int(m.payload[:10]) for m in messages]


@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("window", [20, 5])
def test_a_3_1_1_client_gets_at_most_the_window(
    mochi_factory: MochiFactory, window: int, qos: int
) -> None:
    broker = mochi_factory(trace=False, inflight_v311=window)
    client_id = f"v311-{uuid.uuid4().hex[:10]}"
    total = 10 * window + 3
    client = make_backlog(broker, config(client_id, ProtocolLevel.MQTT_3_1_1, None), qos, total)
    assert client.connect().session_present

    batches, received = drain_in_windows(client, total, window, qos)
    client.disconnect()

    assert batches == expected_batches(total, window)
    assert sequence(received) == list(range(total)), "not every message, or out of order"
    assert [m.topic for m in received] == [message(i)[0] for i in range(total)]
    assert not any(m.dup for m in received), "a message never sent before came with DUP=1"
    last = closed_windows(broker, client_id, 2)[-1]
    assert last == WindowClosed(window=window, peak_in_flight=window, in_flight=0, queued=0)


@pytest.mark.parametrize("qos", [1, 2])
def test_an_mqtt_5_client_gets_at_most_its_receive_maximum(
    mochi_factory: MochiFactory, qos: int
) -> None:
    """The 3.1.1 window does not apply: the client's Receive Maximum does. The session allows
    topic aliases, and the backlog's topics still arrive by name: mochi 2.7.9 gives messages
    queued for an offline session aliases of the connection that ended, and itself resends them
    with those, which the new connection never set."""
    broker = mochi_factory(trace=False, inflight_v311=20)
    client_id = f"v5-{uuid.uuid4().hex[:10]}"
    receive_maximum, total = 7, 75
    session = config(client_id, ProtocolLevel.MQTT_5, receive_maximum, topic_alias_maximum=16)
    client = make_backlog(broker, session, qos, total)
    assert client.connect().session_present

    batches, received = drain_in_windows(client, total, receive_maximum, qos)
    client.disconnect()

    assert batches == expected_batches(total, receive_maximum)
    assert sequence(received) == list(range(total))
    assert [m.topic for m in received] == [message(i)[0] for i in range(total)]
    last = closed_windows(broker, client_id, 2)[-1]
    assert last == WindowClosed(receive_maximum, receive_maximum, 0, 0)


def test_messages_written_before_a_reconnect_come_again_with_dup(
    mochi_factory: MochiFactory,
) -> None:
    """One window goes out, the connection ends unacknowledged: the next connection gets that
    window again with DUP=1 first, then the rest with DUP=0, still within the window."""
    window, total = 10, 35
    broker = mochi_factory(trace=False, inflight_v311=window)
    client_id = f"dup-{uuid.uuid4().hex[:10]}"
    session = config(client_id, ProtocolLevel.MQTT_3_1_1, None)
    first = make_backlog(broker, session, 1, total)
    first.connect()
    held: list[Publish] = []

    def first_window() -> bool:
        held.extend(first.poll(0.1).messages)
        return len(held) >= window

    wait_until(
        first_window,
        TIMEOUT,
        message=lambda: f"{len(held)} of the first window arrived",
    )
    first.close()  # no acknowledgement, no DISCONNECT
    closed = closed_windows(broker, client_id, 2)[-1]
    assert (closed.peak_in_flight, closed.in_flight, closed.queued) == (window, window, total)

    second = MqttClient(broker.url, session, [(FILTER, 1)])
    assert second.connect().session_present
    batches, received = drain_in_windows(second, total, window, 1)
    second.disconnect()
    assert batches == expected_batches(total, window)
    assert sequence(received) == list(range(total))
    assert [m.dup for m in received] == [True] * window + [False] * (total - window)


def test_without_the_flag_mochi_sends_a_resumed_backlog_at_once(
    mochi_factory: MochiFactory,
) -> None:
    """Why the flag exists: stock mochi 2.7.9 resends a resumed session's whole queue without
    waiting for one acknowledgement (here to a 3.1.1 client)."""
    broker = mochi_factory(trace=False)
    client_id = f"stock-{uuid.uuid4().hex[:10]}"
    total = 100
    client = make_backlog(broker, config(client_id, ProtocolLevel.MQTT_3_1_1, None), 1, total)
    client.connect()
    held: list[Publish] = []

    def all_arrived() -> bool:
        held.extend(client.poll(0.1).messages)
        return len(held) >= total

    wait_until(
        all_arrived,
        TIMEOUT,
        message=lambda: f"{len(held)} of {total} arrived without acknowledgements",
    )
    client.acknowledge(held)
    client.disconnect()
    assert broker.windows_closed(client_id) == []
