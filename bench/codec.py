"""PUBLISH decode rate: our stream decoder against paho-mqtt's packet reader on the same bytes.

``python -m bench.codec [--messages N] [--repeat R] [--chunk BYTES] [--profile]``

One stream of QoS 1 PUBLISH frames (100-byte payloads, topics like
``plant/line-3/sensor-17/telemetry``) is cut into socket-sized reads at arbitrary byte
positions. Peers, all in one process and one run:

* ``ours: decode only``: ``StreamDecoder.feed`` over the reads, nothing else done per message;
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
"""

from __future__ import annotations

import argparse
import cProfile
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from connector.mqtt.codec import encode_publish
from connector.mqtt.decoder import StreamDecoder
from connector.mqtt.packets import Packet, Publish
from connector.mqtt.session import ClientSession, SessionConfig

from .common import (
    Stats,
    describe_machine,
    format_table,
    machine_info,
    paired_ratio,
    profile_report,
    rate,
    ratio,
    write_results,
)

GOAL_VS_PAHO = 10.0
CONNACK = b"\x20\x02\x00\x00"

OURS_DECODE = "ours: decode only"
OURS_CALLBACK = "ours: decode + callback"
OURS_SESSION = "ours: session + acks"
PAHO = "paho-mqtt: _packet_read + on_message"
PEERS = (OURS_DECODE, OURS_CALLBACK, OURS_SESSION, PAHO)


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


def payload_of(index: int, size: int) -> bytes:
    """A ``size``-byte payload starting with the message's 10-digit sequence number."""
    return (b"%010d" % index + b"x" * size)[:size]


def build_workload(messages: int, payload_size: int, chunk: int, seed: int) -> Workload:
    """QoS 1 PUBLISH frames cut into reads of chunk/2..chunk bytes at random positions."""
    topics = [topic_of(i) for i in range(messages)]
    payloads = [payload_of(i, payload_size) for i in range(messages)]
    packet_ids = [i % 0xFFFF + 1 for i in range(messages)]
    stream = b"".join(
        encode_publish(t, p, 1, pid) for t, p, pid in zip(topics, payloads, packet_ids, strict=True)
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


def run_ours_decode(work: Workload) -> tuple[float, int]:
    """Decode only: count the packets ``feed`` returns. Returns (seconds, messages)."""
    feed = StreamDecoder().feed
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

    feed = StreamDecoder().feed
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
    decoder = StreamDecoder()
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
        order = PEERS[rep % len(PEERS) :] + PEERS[: rep % len(PEERS)]
        for peer in order:
            seconds, count = runners[peer]()
            _expect(count == work.messages, f"{peer} counted {count} of {work.messages}")
            rates[peer].append(count / seconds)
    return rates


def profile(work: Workload) -> str:
    """cProfile of the session receive path, sorted by own time."""
    profiler = cProfile.Profile()
    profiler.runcall(run_ours_session, work)
    return profile_report(profiler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.codec", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--messages", type=int, default=200_000, help="PUBLISH frames per run")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per peer")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--chunk", type=int, default=65_536, help="largest read in bytes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", help="results file (default bench/results/codec.json)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of ours")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.repeat < 1 or args.size < 10 or args.chunk < 1:
        parser.error("--messages, --repeat and --chunk must be >= 1 and --size >= 10")

    info = machine_info()
    work = build_workload(args.messages, args.size, args.chunk, args.seed)
    verify(work)
    rates = measure(work, args.repeat)
    stats = {peer: Stats.of(values) for peer, values in rates.items()}
    vs_paho = {peer: paired_ratio(rates[peer], rates[PAHO]) for peer in PEERS if peer != PAHO}
    headline = vs_paho[OURS_CALLBACK]

    rows = []
    for peer in PEERS:
        s = stats[peer]
        rows.append(
            [
                peer,
                rate(s.median),
                rate(s.min),
                rate(s.max),
                f"{1e6 / s.median:.2f}",
                ratio(vs_paho[peer].median) if peer in vs_paho else "1.00x",
            ]
        )
    print(f"bench.codec: {describe_machine(info)}")
    print(
        f"{work.messages:,} QoS 1 PUBLISH frames, {args.size}-byte payloads, "
        f"{work.size / work.messages:.0f} bytes a frame, {len(work.reads)} reads of "
        f"{args.chunk // 2:,}..{args.chunk:,} bytes; median of {args.repeat}"
    )
    print()
    print(
        format_table(
            ["peer", "msg/s median", "min", "max", "us/msg", "vs paho"],
            rows,
        )
    )
    print()
    verdict = "met" if headline.median >= GOAL_VS_PAHO else "NOT met"
    print(
        f"goal ours/paho >= {GOAL_VS_PAHO:g}x (decode + callback): {ratio(headline.median)} "
        f"(range {ratio(headline.min)}..{ratio(headline.max)}) -> {verdict}"
    )
    if args.profile:
        print()
        print(profile(work))

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
    }
    path = write_results("codec", results, None if args.output is None else Path(args.output))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
