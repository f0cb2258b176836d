"""PUBLISH decode rate: our stream decoder against paho-mqtt's packet reader on the same bytes.

One stream of QoS 1 PUBLISH frames (100-byte payloads, topics like
``plant/line-3/sensor-17/telemetry``) is cut into socket-sized reads at arbitrary byte
positions. Peers, all in one process and one run:

* ``ours: decode only``: ``ReceiveBuffer.feed`` over the reads, nothing else done per message;
  gives the decode cost per message.
* ``ours: decode + callback``: the same, with a counting callback per ``Publish`` (what paho's
  ``on_message`` costs the caller); compared with paho for the project's >= 10x goal.
* ``ours: session + acks``: ``ClientSession.receive_data`` plus ``ack_many`` and
  ``data_to_send`` for every read, i.e. the client's whole receive path without the socket.
* ``paho``: ``Client._packet_read()`` reading the same reads from a fake socket, counting
  ``on_message`` callbacks; its PUBACKs go to the fake socket's ``send``, which discards them.
  paho asks the socket for each frame in 3-4 ``recv`` calls; the fake serves them far cheaper
  than the system calls it would make on a real socket, so this favours paho.

Every peer is checked once in full (every topic, payload and packet id, and the PUBACK bytes)
before the timed repetitions; timed runs check the message count.

Two more tables, decode only (``ReceiveBuffer.feed``), same messages and reads:

* MQTT 5.0 PUBLISH: the 3.1.1 stream again; the same messages at protocol level 5 without
  properties (one Property Length byte more); with a content type and two user properties; and
  3.1.1 frames of that same total size (payload grown), the fair comparison for the last one.
* Topic cache: 4,096, 4,097 and 10,000 distinct topics, cycling, against the decoder's
  4,096-topic cache (``TOPIC_CACHE_SIZE``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from connector.mqtt.config import SessionConfig
from connector.mqtt.decode import TOPIC_CACHE_SIZE
from connector.mqtt.encode import encode_publish
from connector.mqtt.packets import Packet, ProtocolLevel, Publish
from connector.mqtt.properties import Properties
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession

from .common import Stats, finish, machine_info, paired_ratio, turn
from .payloads import numbered
from .render import Charts, Lines, goals_table, md_table, num, ratios_table, stats_cells, times

GOAL_VS_PAHO = 10.0
CONNACK = b"\x20\x02\x00\x00"

OURS_DECODE = "ours: decode only"
OURS_CALLBACK = "ours: decode + callback"
OURS_SESSION = "ours: session + acks"
PAHO = "paho-mqtt: _packet_read + on_message"
PEERS = (OURS_DECODE, OURS_CALLBACK, OURS_SESSION, PAHO)

V311 = "3.1.1"
V5_BARE = "5.0, no properties"
V5_PROPS = "5.0, content type + 2 user properties"
V311_SAME_SIZE = "3.1.1, same frame size as the line above"
V5_CASES = (V311, V5_BARE, V5_PROPS, V311_SAME_SIZE)
V5_PROPERTIES = Properties(
    content_type="application/json", user_properties=[("site", "plant-3"), ("unit", "celsius")]
)
GOAL_V5_PROPERTIES = 1.5
"""A v5 PUBLISH with V5_PROPERTIES costs at most this many times a 3.1.1 one of its size."""

CACHE_TOPICS = (TOPIC_CACHE_SIZE, TOPIC_CACHE_SIZE + 1, 10_000)


@dataclass(frozen=True, slots=True)
class Workload:
    """The frames of one run, cut into reads, and what they must decode to."""

    reads: list[bytes]
    topics: list[str]
    payloads: list[bytes]
    packet_ids: list[int]

    @property
    def messages(self) -> int:
        return len(self.topics)

    @property
    def size(self) -> int:
        return sum(len(r) for r in self.reads)


def topic_of(index: int) -> str:
    return f"plant/line-{index % 8}/sensor-{index % 64}/telemetry"


def build_workload(
    messages: int,
    payload_size: int,
    chunk: int,
    seed: int,
    level: int = ProtocolLevel.MQTT_3_1_1,
    properties: Properties | None = None,
    topic: Callable[[int], str] = topic_of,
) -> Workload:
    """QoS 1 PUBLISH frames cut into reads of chunk/2..chunk bytes at random positions."""
    topics = [topic(i) for i in range(messages)]
    payloads = [numbered(i, payload_size) for i in range(messages)]
    packet_ids = [i % 0xFFFF + 1 for i in range(messages)]
    stream = b"".join(
        encode_publish(t, p, 1, pid, properties=properties, level=level)
        for t, p, pid in zip(topics, payloads, packet_ids, strict=True)
    )
    rng = random.Random(seed)
    reads = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(max(1, chunk // 2), chunk)
        reads.append(stream[pos : pos + step])
        pos += step
    return Workload(reads, topics, payloads, packet_ids)


# ------------------------------------------------------------------------------------ ours


def run_ours_decode(work: Workload, level: int = ProtocolLevel.MQTT_3_1_1) -> tuple[float, int]:
    """Decode only: count the packets ``feed`` returns. Returns (seconds, messages)."""
    feed = ReceiveBuffer(level).feed
    count = 0
    start = time.perf_counter()
    for data in work.reads:
        count += len(feed(data))
    return time.perf_counter() - start, count


def run_ours_callback(work: Workload) -> tuple[float, int]:
    """Decode and hand each ``Publish`` to a counting callback."""
    count = 0

    def on_message(message: Packet) -> None:
        nonlocal count
        count += 1

    feed = ReceiveBuffer().feed
    start = time.perf_counter()
    for data in work.reads:
        for packet in feed(data):
            on_message(packet)
    return time.perf_counter() - start, count


def _connected_session() -> ClientSession:
    session = ClientSession(SessionConfig("bench-codec", clean_session=True))
    session.connect(time.monotonic())
    session.data_to_send()
    session.receive_data(CONNACK, time.monotonic())
    return session


def run_ours_session(
    work: Workload, on_message: Callable[[Publish], None] | None = None
) -> tuple[float, int, int]:
    """The session's receive path per read: events, callback, acks queued and taken.

    Returns (seconds, messages, acknowledgement bytes produced).
    """
    count = 0

    def counting(message: Publish) -> None:
        nonlocal count
        count += 1

    callback = on_message or counting
    session = _connected_session()
    receive = session.receive_data
    ack_many = session.ack_many
    take = session.data_to_send
    clock = time.monotonic
    acked = 0
    start = time.perf_counter()
    for data in work.reads:
        now = clock()
        messages = [e for e in receive(data, now) if type(e) is Publish]
        for message in messages:
            callback(message)
        ack_many(messages, now)
        acked += len(take())
    elapsed = time.perf_counter() - start
    if on_message is not None:
        count = work.messages
    return elapsed, count, acked


# ------------------------------------------------------------------------------------ paho


class FakeSocket:
    """Serves prepared reads to ``recv(n)`` (at most ``n`` bytes, never across two reads, as
    a real socket returns what has arrived) and discards what is sent, counting bytes."""

    def __init__(self, reads: Sequence[bytes]) -> None:
        self._reads = iter(reads)
        self._buf = b""
        self._pos = 0
        self.sent = 0

    def recv(self, size: int) -> bytes:
        pos = self._pos
        buf = self._buf
        if pos >= len(buf):
            nxt = next(self._reads, None)
            if nxt is None:
                raise BlockingIOError
            self._buf = buf = nxt
            pos = 0
        data = buf[pos : pos + size]
        self._pos = pos + len(data)
        return data

    def send(self, data: bytes) -> int:
        self.sent += len(data)
        return len(data)

    def pending(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _paho_client(reads: Sequence[bytes], on_message: Callable[..., None]) -> tuple[Any, FakeSocket]:
    """A paho client in the connected state whose socket is a FakeSocket over ``reads``."""
    from paho.mqtt import client as paho

    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2, client_id="bench-codec", protocol=paho.MQTTv311
    )
    sock = FakeSocket(reads)
    client._sock = cast("paho.SocketLike", sock)  # has what _packet_read and PUBACKs use
    client._state = paho._ConnectionState.MQTT_CS_CONNECTED
    client.on_message = on_message
    return client, sock


def run_paho(
    work: Workload, on_message: Callable[..., None] | None = None
) -> tuple[float, int, int]:
    """paho's reader until the fake socket is empty. Returns (seconds, messages, bytes sent)."""
    count = 0

    def counting(client: object, userdata: object, message: object) -> None:
        nonlocal count
        count += 1

    client, sock = _paho_client(work.reads, on_message or counting)
    read = client._packet_read
    start = time.perf_counter()
    rc = read()
    while not rc:
        rc = read()
    elapsed = time.perf_counter() - start
    if rc != -1:  # MQTT_ERR_AGAIN: the fake socket ran dry; anything else is a failure
        raise RuntimeError(f"paho's packet reader failed with code {rc}")
    client._sock = None
    if on_message is not None:
        count = work.messages
    return elapsed, count, sock.sent


# ------------------------------------------------------------------------------------ checks


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"verification failed: {what}")


def _check_messages(
    peer: str, got: list[tuple[str, bytes, int | None, int]], work: Workload
) -> None:
    _expect(len(got) == work.messages, f"{peer} decoded {len(got)} of {work.messages} messages")
    expected = list(
        zip(work.topics, work.payloads, work.packet_ids, [1] * work.messages, strict=True)
    )
    for index, (have, want) in enumerate(zip(got, expected, strict=True)):
        _expect(have == want, f"{peer}: message {index} is {have!r}, expected {want!r}")


def verify(work: Workload) -> None:
    """Check every message of every peer once (also the warm-up)."""
    decoder = ReceiveBuffer()
    got = [
        (p.topic, p.payload, p.packet_id, p.qos)
        for data in work.reads
        for p in decoder.feed(data)
        if isinstance(p, Publish)
    ]
    _check_messages("ours (decoder)", got, work)
    _expect(decoder.buffered == 0, "ours left bytes in the decoder")

    got = []
    _, _, acked = run_ours_session(
        work, lambda m: got.append((m.topic, m.payload, m.packet_id, m.qos))
    )
    _check_messages("ours (session)", got, work)
    _expect(acked == 4 * work.messages, f"ours (session) produced {acked} bytes of PUBACKs")

    got = []
    _, _, sent = run_paho(
        work, lambda c, u, m: got.append((m.topic, bytes(m.payload), m.mid, m.qos))
    )
    _check_messages("paho", got, work)
    _expect(sent == 4 * work.messages, f"paho sent {sent} bytes of PUBACKs")


# ------------------------------------------------------------------------------ extra tables


def build_v5_workloads(messages: int, size: int, chunk: int, seed: int) -> dict[str, Workload]:
    """The MQTT 5.0 table's streams; the last one's payloads grow by what the properties add."""
    v5 = ProtocolLevel.MQTT_5
    grown = len(encode_publish("t", b"", 1, 1, properties=V5_PROPERTIES, level=v5)) - len(
        encode_publish("t", b"", 1, 1)
    )
    return {
        V311: build_workload(messages, size, chunk, seed),
        V5_BARE: build_workload(messages, size, chunk, seed, v5),
        V5_PROPS: build_workload(messages, size, chunk, seed, v5, V5_PROPERTIES),
        V311_SAME_SIZE: build_workload(messages, size + grown, chunk, seed),
    }


def build_cache_workloads(messages: int, size: int, chunk: int, seed: int) -> dict[int, Workload]:
    """Streams cycling through n distinct topics, for each n of CACHE_TOPICS."""

    def cycling(n: int) -> Callable[[int], str]:
        return lambda i: f"plant/device-{i % n}/telemetry"

    return {
        n: build_workload(max(messages, 4 * n), size, chunk, seed, topic=cycling(n))
        for n in CACHE_TOPICS
    }


def _level_of(case: str) -> int:
    return ProtocolLevel.MQTT_5 if case.startswith("5.0") else ProtocolLevel.MQTT_3_1_1


def verify_decode(work: Workload, level: int, properties: Properties | None, what: str) -> None:
    """Every message of a decode-only stream, with its properties."""
    decoder = ReceiveBuffer(level)
    got = [p for data in work.reads for p in decoder.feed(data)]
    _expect(len(got) == work.messages, f"{what}: {len(got)} of {work.messages} messages")
    for index, packet in enumerate(got):
        _expect(
            isinstance(packet, Publish)
            and (packet.topic, packet.payload, packet.packet_id, packet.properties)
            == (work.topics[index], work.payloads[index], work.packet_ids[index], properties),
            f"{what}: message {index} is {packet!r}",
        )


def measure_decode(
    works: dict[Any, Workload], levels: dict[Any, int], repeat: int
) -> dict[Any, list[float]]:
    """Decode-only messages per second of each stream, ``repeat`` times, order rotated."""
    keys = list(works)
    rates: dict[Any, list[float]] = {key: [] for key in keys}
    for rep in range(repeat):
        for key in turn(keys, rep):
            seconds, count = run_ours_decode(works[key], levels[key])
            _expect(count == works[key].messages, f"{key} counted {count}")
            rates[key].append(count / seconds)
    return rates


# ------------------------------------------------------------------------------------ main


def measure(work: Workload, repeat: int) -> dict[str, list[float]]:
    """Messages per second of every peer, ``repeat`` times, peers rotated each repetition."""
    runners: dict[str, Callable[[], tuple[float, int]]] = {
        OURS_DECODE: lambda: run_ours_decode(work),
        OURS_CALLBACK: lambda: run_ours_callback(work),
        OURS_SESSION: lambda: run_ours_session(work)[:2],
        PAHO: lambda: run_paho(work)[:2],
    }
    rates: dict[str, list[float]] = {peer: [] for peer in PEERS}
    for rep in range(repeat):
        order = turn(PEERS, rep)
        for peer in order:
            seconds, count = runners[peer]()
            _expect(count == work.messages, f"{peer} counted {count} of {work.messages}")
            rates[peer].append(count / seconds)
    return rates


def measure_extra(args: argparse.Namespace) -> dict[str, Any]:
    """The MQTT 5.0 and topic cache tables' figures."""
    v5_works = build_v5_workloads(args.messages, args.size, args.chunk, args.seed)
    for case, work in v5_works.items():
        verify_decode(
            work, _level_of(case), V5_PROPERTIES if case == V5_PROPS else None, f"v5 {case}"
        )
    v5_rates = measure_decode(v5_works, {c: _level_of(c) for c in v5_works}, args.repeat)
    v5_stats = {case: Stats.of(values) for case, values in v5_rates.items()}
    # Cost ratios (time per message), per repetition: above 1 is slower.
    bare = paired_ratio(v5_rates[V311], v5_rates[V5_BARE])
    props = paired_ratio(v5_rates[V311_SAME_SIZE], v5_rates[V5_PROPS])
    cache_works = build_cache_workloads(args.messages, args.size, args.chunk, args.seed)
    for n, work in cache_works.items():
        verify_decode(work, ProtocolLevel.MQTT_3_1_1, None, f"{n} topics")
    cache_rates = measure_decode(
        cache_works, dict.fromkeys(cache_works, ProtocolLevel.MQTT_3_1_1), args.repeat
    )
    base = cache_rates[CACHE_TOPICS[0]]
    return {
        "mqtt5": {
            "unit": "messages/s",
            "properties": repr(V5_PROPERTIES),
            "streams": {
                case: {
                    **v5_stats[case].as_dict(1),
                    "frame_bytes": round(v5_works[case].size / v5_works[case].messages, 1),
                    "us_per_message": round(1e6 / v5_stats[case].median, 3),
                }
                for case in V5_CASES
            },
            "cost_ratio_v5_bare_vs_3_1_1": bare.as_dict(3),
            "cost_ratio_v5_properties_vs_3_1_1_same_size": props.as_dict(3),
            "goal": {
                "ratio": "cost of 5.0 with properties / 3.1.1 of the same size (at most)",
                "target": GOAL_V5_PROPERTIES,
                "measured": round(props.median, 3),
                "met": props.median <= GOAL_V5_PROPERTIES,
            },
        },
        "topic_cache": {
            "cache_size": TOPIC_CACHE_SIZE,
            "unit": "messages/s",
            "by_topics": {
                str(n): {
                    **Stats.of(rates).as_dict(1),
                    "messages": cache_works[n].messages,
                    "ratio_to_first": round(paired_ratio(rates, base).median, 3),
                }
                for n, rates in cache_rates.items()
            },
        },
    }


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    out = [
        f"PUBLISH decoding in process: {num(params.get('messages'))} QoS {params.get('qos')} "
        f"frames of {params.get('payload_bytes')}-byte payloads, the same bytes for every "
        "parser; median of "
        f"{params.get('repeat')} runs.",
        "",
    ]
    rows = [
        [peer, *stats_cells(st), num(st.get("us_per_message"), 3)]
        for peer, st in data["peers"].items()
    ]
    out += [*md_table(["parser", "msg/s median", "min", "max", "µs/msg"], rows), ""]
    out += ratios_table(data.get("ratios_vs_paho"), "ratio vs paho-mqtt")
    out += ["", *goals_table(data.get("goal"))]
    v5, cache = data.get("mqtt5"), data.get("topic_cache")
    if isinstance(v5, Mapping):
        rows = [
            [case, num(st["frame_bytes"]), *stats_cells(st), num(st["us_per_message"], 3)]
            for case, st in v5["streams"].items()
        ]
        out += [
            "",
            "MQTT 5.0 PUBLISH, decode only (`ReceiveBuffer.feed`), the same messages: cost of 5.0 "
            f"without properties / 3.1.1 {times(v5['cost_ratio_v5_bare_vs_3_1_1']['median'])}.",
            "",
            *md_table(["stream", "bytes/frame", "msg/s median", "min", "max", "µs/msg"], rows),
            "",
            *goals_table(v5["goal"]),
        ]
    if isinstance(cache, Mapping):
        rows = [
            [num(int(n)), num(st["messages"]), *stats_cells(st), times(st["ratio_to_first"])]
            for n, st in cache["by_topics"].items()
        ]
        out += [
            "",
            f"Topic cache ({num(cache['cache_size'])} topics): distinct topics cycling, decode "
            "only, 3.1.1 QoS 1.",
            "",
            *md_table(["topics", "messages", "msg/s median", "min", "max", "ratio"], rows),
        ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.codec", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000, help="PUBLISH frames per run")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per peer")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--chunk", type=int, default=65_536, help="largest read in bytes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--output", type=Path, help="results file (default bench/results/codec.json)"
    )
    args = parser.parse_args(argv)
    if args.messages < 1 or args.repeat < 1 or args.size < 10 or args.chunk < 1:
        parser.error("--messages, --repeat and --chunk must be >= 1 and --size >= 10")
    info = machine_info()
    extra = measure_extra(args)
    work = build_workload(args.messages, args.size, args.chunk, args.seed)
    verify(work)
    rates = measure(work, args.repeat)
    stats = {peer: Stats.of(values) for peer, values in rates.items()}
    vs_paho = {peer: paired_ratio(rates[peer], rates[PAHO]) for peer in PEERS if peer != PAHO}
    headline = vs_paho[OURS_CALLBACK]
    results = {
        "benchmark": "codec",
        "machine": info,
        "parameters": {
            "messages": work.messages,
            "qos": 1,
            "payload_bytes": args.size,
            "frame_bytes": round(work.size / work.messages, 1),
            "reads": len(work.reads),
            "read_bytes": [max(1, args.chunk // 2), args.chunk],
            "repeat": args.repeat,
            "seed": args.seed,
            "topic_example": topic_of(3),
        },
        "unit": "messages/s",
        "peers": {
            peer: {**stats[peer].as_dict(1), "us_per_message": round(1e6 / stats[peer].median, 3)}
            for peer in PEERS
        },
        "ratios_vs_paho": {peer: r.as_dict(3) for peer, r in vs_paho.items()},
        "goal": {
            "ratio": f"'{OURS_CALLBACK}' / paho",
            "target": GOAL_VS_PAHO,
            "measured": round(headline.median, 3),
            "met": headline.median >= GOAL_VS_PAHO,
        },
        **extra,
    }
    return finish("codec", results, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
