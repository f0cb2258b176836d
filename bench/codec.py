"""PUBLISH decode rate (``python -m bench.codec``): our stream decoder, with a callback and with
the whole session receive path, against paho-mqtt's packet reader over a fake socket, on the same
QoS 1 frames cut into random reads; every peer checked in full once, then timed in turns."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode_publish
from connector.mqtt.packets import Publish
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession

from . import common
from .payloads import numbered
from .render import Charts, Lines, goals_table, md_table, num, ratios_table, stats_cells

GOAL_VS_PAHO = 10.0
CONNACK = b"\x20\x02\x00\x00"
OURS_DECODE, OURS_CALLBACK = "ours: decode only", "ours: decode + callback"
OURS_SESSION, PAHO = "ours: session + acks", "paho-mqtt: _packet_read + on_message"
PEERS = (OURS_DECODE, OURS_CALLBACK, OURS_SESSION, PAHO)
Message = tuple[str, bytes, int | None, int]  # topic, payload, packet id, QoS


@dataclass(frozen=True, slots=True)
class Workload:
    """The frames of one run cut into reads, and the messages they must decode to."""

    reads: list[bytes]
    messages: list[Message]

    @property
    def size(self) -> int:
        return sum(len(r) for r in self.reads)


def topic_of(index: int) -> str:
    return f"plant/line-{index % 8}/sensor-{index % 64}/telemetry"


def build_workload(messages: int, payload_size: int, chunk: int, seed: int) -> Workload:
    """QoS 1 PUBLISH frames cut into reads of chunk/2..chunk bytes at random positions."""
    expected: list[Message] = [
        (topic_of(i), numbered(i, payload_size), i % 0xFFFF + 1, 1) for i in range(messages)
    ]
    stream = b"".join(encode_publish(t, p, qos, pid) for t, p, pid, qos in expected)
    rng, reads, pos = random.Random(seed), [], 0
    while pos < len(stream):
        step = rng.randint(max(1, chunk // 2), chunk)
        reads.append(stream[pos : pos + step])
        pos += step
    return Workload(reads, expected)


def run_ours_decode(work: Workload) -> tuple[float, int]:
    """Decode only: count the packets ``feed`` returns. Returns (seconds, messages)."""
    feed = ReceiveBuffer().feed
    count = 0
    start = time.perf_counter()
    for data in work.reads:
        count += len(feed(data))
    return time.perf_counter() - start, count


def run_ours_callback(work: Workload) -> tuple[float, int]:
    """Decode and hand each ``Publish`` to a counting callback."""
    count = 0

    def on_message(message: object) -> None:
        nonlocal count
        count += 1

    feed = ReceiveBuffer().feed
    start = time.perf_counter()
    for data in work.reads:
        for packet in feed(data):
            on_message(packet)
    return time.perf_counter() - start, count


def run_ours_session(
    work: Workload, on_message: Callable[[Publish], None] | None = None
) -> tuple[float, int, int]:
    """The session's receive path per read; (seconds, messages, acknowledgement bytes)."""
    count = 0

    def counting(message: Publish) -> None:
        nonlocal count
        count += 1

    callback = on_message or counting
    session = ClientSession(SessionConfig("bench-codec", clean_session=True))
    session.connect(time.monotonic())
    session.data_to_send()
    session.receive_data(CONNACK, time.monotonic())
    receive, ack_many, take = session.receive_data, session.ack_many, session.data_to_send
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
    return elapsed, len(work.messages) if on_message else count, acked


class FakeSocket:
    """Serves prepared reads to ``recv(n)`` as a socket would and counts what is sent."""

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


def run_paho(
    work: Workload, on_message: Callable[..., None] | None = None
) -> tuple[float, int, int]:
    """paho's reader until the fake socket is empty. Returns (seconds, messages, bytes sent)."""
    from paho.mqtt import client as paho

    count = 0

    def counting(client: object, userdata: object, message: object) -> None:
        nonlocal count
        count += 1

    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2, client_id="bench-codec", protocol=paho.MQTTv311
    )
    sock = FakeSocket(work.reads)
    client._sock = cast("paho.SocketLike", sock)  # has what _packet_read and PUBACKs use
    client._state = paho._ConnectionState.MQTT_CS_CONNECTED
    client.on_message = on_message or counting
    read = client._packet_read
    start = time.perf_counter()
    rc = read()
    while not rc:
        rc = read()
    elapsed = time.perf_counter() - start
    if rc != -1:  # MQTT_ERR_AGAIN: the fake socket ran dry; anything else is a failure
        raise common.BenchError(f"paho's packet reader failed with code {rc}")
    client._sock = None
    return elapsed, len(work.messages) if on_message else count, sock.sent


def verify(work: Workload) -> None:
    """Every message of every parser once, and the PUBACKs (also the warm-up)."""
    found: dict[str, list[Message]] = {"ours (decoder)": [], "ours (session)": [], "paho": []}
    decoder = ReceiveBuffer()
    found["ours (decoder)"] = [
        (p.topic, p.payload, p.packet_id, p.qos) for data in work.reads for p in decoder.feed(data)
        if isinstance(p, Publish)
    ]  # fmt: skip
    _, _, acked = run_ours_session(
        work, lambda m: found["ours (session)"].append((m.topic, m.payload, m.packet_id, m.qos))
    )
    _, _, sent = run_paho(
        work, lambda c, u, m: found["paho"].append((m.topic, bytes(m.payload), m.mid, m.qos))
    )
    for peer, got in found.items():
        if got != work.messages:
            raise common.BenchError(
                f"{peer} decoded {len(got)} messages, not the {len(work.messages)}"
            )
    if acked != sent or sent != 4 * len(work.messages):
        raise common.BenchError(f"PUBACK bytes: ours {acked}, paho {sent}")


def measure(work: Workload, repeat: int) -> dict[str, list[float]]:
    """Messages per second of every peer, ``repeat`` times, peers in turns."""
    runners: dict[str, Callable[[], tuple[float, int]]] = {
        OURS_DECODE: lambda: run_ours_decode(work),
        OURS_CALLBACK: lambda: run_ours_callback(work),
        OURS_SESSION: lambda: run_ours_session(work)[:2],
        PAHO: lambda: run_paho(work)[:2],
    }
    rates: dict[str, list[float]] = {peer: [] for peer in PEERS}
    for _, peer in common.in_turns(PEERS, repeat):
        seconds, count = runners[peer]()
        if count != len(work.messages):
            raise common.BenchError(f"{peer} counted {count} of {len(work.messages)}")
        rates[peer].append(count / seconds)
    return rates


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    rows = [
        [peer, *stats_cells(st), num(st.get("us_per_message"), 3)]
        for peer, st in data["peers"].items()
    ]
    return [
        f"PUBLISH decoding in process: {num(params.get('messages'))} QoS {params.get('qos')} "
        f"frames of {params.get('payload_bytes')}-byte payloads, the same bytes for every "
        f"parser; median of {params.get('repeat')} runs.",
        "",
        *md_table(["parser", "msg/s median", "min", "max", "µs/msg"], rows),
        "",
        *ratios_table(data.get("ratios_vs_paho"), "ratio vs paho-mqtt"),
        "",
        *goals_table(data.get("goal")),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.arguments("codec", __doc__, messages=200_000, repeat=5, size=100)
    parser.add_argument(
        "--chunk", type=common.at_least(1), default=65_536, help="largest read in bytes"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    def results() -> dict[str, Any]:
        info = common.machine_info()
        work = build_workload(args.messages, args.size, args.chunk, args.seed)
        verify(work)
        rates = measure(work, args.repeat)
        stats = {peer: common.Stats.of(values) for peer, values in rates.items()}
        vs_paho = {peer: common.paired_ratio(rates[peer], rates[PAHO]) for peer in PEERS[:-1]}
        headline = vs_paho[OURS_CALLBACK].median
        params = {
            "messages": args.messages, "qos": 1, "payload_bytes": args.size,
            "frame_bytes": round(work.size / args.messages, 1), "repeat": args.repeat,
        }  # fmt: skip
        return {
            "machine": info,
            "parameters": params,
            "peers": {
                peer: {**st.as_dict(1), "us_per_message": round(1e6 / st.median, 3)}
                for peer, st in stats.items()
            },
            "ratios_vs_paho": {peer: r.as_dict(3) for peer, r in vs_paho.items()},
            "goal": common.goal(f"'{OURS_CALLBACK}' / paho", GOAL_VS_PAHO, headline),
        }

    return common.finish("codec", results, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
