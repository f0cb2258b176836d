"""Flow control over a long round trip: a backlog drained over MQTT 3.1.1 and MQTT 5 through a
proxy that adds 10 ms each way, against a broker that enforces its in-flight limit.

``python -m bench.flow_control [--messages N] [--repeat R] [--delay-ms 10] [--window 20]
[--receive-maximum 65535] [--arms a b c d] [--drainer auto|receiver|client-wal]
[--output FILE]``

Why: a broker sends a client at most a fixed number of unacknowledged QoS 1/2 messages (the
in-flight window), so over a link with round-trip time RTT a drain reaches at most window / RTT
messages per second whatever the client does: Mosquitto 2.0.12+ keeps 20 per 3.1.1 client
(``max_inflight_messages``), EMQX 32, so a 3.1.1 subscriber 20 ms away gets about 1,000 msg/s.
With MQTT 5 the client sets the window itself (Receive Maximum in CONNECT).

Each repetition drains four fresh backlogs, one per arm, in a rotated order:

* (a) MQTT 3.1.1 on loopback, straight to the broker;
* (b) MQTT 3.1.1 through the delay proxy (``devtools.delay_proxy``, a separate process adding
  ``--delay-ms`` to every byte each way: 20 ms round trip by default);
* (c) MQTT 5 through the proxy, Receive Maximum ``--receive-maximum``;
* (d) MQTT 5 on loopback, the same Receive Maximum.

The broker: mochi-mqtt 2.7.9 (``tools/mochi-broker``, built by ``make setup``) with
``-inflight-v311 --window`` (default 20, Mosquitto's), a fresh one per drain. With that flag it
keeps at most that many unacknowledged QoS 1/2 messages per 3.1.1 client and at most the
Receive Maximum per MQTT 5 client, a resumed session's backlog included (mochi's own quota
gates neither: tools/mochi-broker/window.go). Debian's Mosquitto 2.0.11 cannot serve here: it
sends a deep queue at once whatever ``max_inflight_messages`` says (eclipse-mosquitto/mosquitto
#2306, fixed in 2.0.12).

Receive Maximum: a window W over a round trip T allows at most W / T msg/s, so W must exceed
the drain rate times T (at 50,000 msg/s and 20 ms, 1,000). The default, 65,535, is MQTT 5's
largest and what a client gets that sends none; ``--receive-maximum`` shows a smaller window's
cap.

Per drain: a persistent session is created with the arm's protocol (MQTT 5: a Session Expiry
Interval that never ends), ``python -m connector.mqtt pub --qos 1`` publishes N numbered
100-byte messages into it (it exits once the broker acknowledged each), then a worker process
resumes the session and drains it into a fresh write-ahead log: every socket read is appended
with one fsync (``WalWriter.append``), then acknowledged in one write
(``MqttClient.acknowledge``). Drainers:

* ``receiver``: the source's receiver itself (``connector.source.receiver.Receiver``, source
  options ``mqttVersion`` 5 and ``receiveMaximum`` for the MQTT 5 arms), as bench.drain's
  ``ours-wal`` peer runs it; the worker refuses to run when the receiver's session does not
  carry those settings;
* ``client-wal``: the receiver's pipeline (``Receiver._persist_then_ack``) run by the worker
  with ``MqttClient`` and the WAL writer, for a receiver that does not take the MQTT 5 settings;
* ``auto`` (the default): ``receiver`` when the source options take ``mqttVersion`` 5 and
  ``receiveMaximum``, else ``client-wal``.

Every arm of a run uses the same drainer; the results name it.

Clock: ``connect -> last message durable``, inside the worker, from just before the connect to
the append of the N-th message (the connect's round trip included). Checks after each drain:
the WAL holds N distinct sequence numbers, nothing else; the broker logged the end of the
drain's connection with nothing in flight and nothing queued, and the largest number of
messages it had in flight at once (``peak in flight``: the window for 3.1.1); a bare client
resuming the session gets nothing. Before each proxied drain one MQTT round trip (CONNECT ->
CONNACK of a throwaway client) through the proxy is timed: ``window / RTT`` is the 3.1.1 cap
(b) should sit at.

Ratios, paired by repetition: (c)/(d) and (c)/(a), MQTT 5 over the long round trip against our
own loopback drain (goal: >= 0.5 for both); (b)/(a), what the 3.1.1 window costs there; (c)/(b),
what flow control gains. Results go to ``bench/results/flow_control.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import (
    RESULTS_DIR,
    BenchError,
    Stats,
    describe_machine,
    format_table,
    machine_info,
    paired_ratio,
    rate,
    ratio,
    spawn_worker,
    wait_stored,
    write_results,
)
from .drain import (
    TOPIC,
    TOPIC_FILTER,
    _left_in_session,
    _note,
    _sequence_checker,
    _worker_result,
    publish_backlog,
)

DEFAULT_MESSAGES = 20_000
DEFAULT_DELAY_MS = 10.0
DEFAULT_WINDOW = 20
"""Mosquitto 2.0.12+'s default ``max_inflight_messages`` for 3.1.1 clients."""
DEFAULT_RECEIVE_MAXIMUM = 0xFFFF
GOAL = 0.5
DRAINERS = ("receiver", "client-wal")
CLOCK = "connect -> last message durable"
CLOCK_AFTER_CONNACK = "CONNACK -> last message durable"
RESULTS_FILE = RESULTS_DIR / "flow_control.json"


@dataclass(frozen=True)
class Arm:
    """One way of draining: protocol level and path to the broker."""

    key: str
    mqtt5: bool
    proxied: bool

    def title(self, rtt_ms: float) -> str:
        path = f"{rtt_ms:g} ms RTT (proxy)" if self.proxied else "loopback"
        return f"({self.key}) MQTT {'5' if self.mqtt5 else '3.1.1'}, {path}"


ARMS = (
    Arm("a", mqtt5=False, proxied=False),
    Arm("b", mqtt5=False, proxied=True),
    Arm("c", mqtt5=True, proxied=True),
    Arm("d", mqtt5=True, proxied=False),
)
ARM_BY_KEY = {arm.key: arm for arm in ARMS}
RATIOS = (
    ("c", "d", "MQTT 5 over the long round trip / MQTT 5 on loopback"),
    ("c", "a", "MQTT 5 over the long round trip / 3.1.1 on loopback"),
    ("b", "a", "3.1.1 over the long round trip / 3.1.1 on loopback"),
    ("c", "b", "MQTT 5 / 3.1.1, both over the long round trip"),
    ("d", "a", "MQTT 5 / 3.1.1, both on loopback"),
)
GOALS = (("c", "d"), ("c", "a"))
"""The ratios that must reach ``GOAL``: MQTT 5 over 20 ms RTT against our own loopback drain
(MQTT 5's, and 3.1.1's)."""


def ratio_name(top: str, bottom: str) -> str:
    return f"({top})/({bottom})"


# ------------------------------------------------------------------------------ worker side


def _session_config(client_id: str, mqtt5: bool, receive_maximum: int) -> Any:
    from connector.mqtt.config import SessionConfig
    from connector.mqtt.packets import ProtocolLevel

    if not mqtt5:
        return SessionConfig(client_id, clean_session=False)
    return SessionConfig(
        client_id, clean_session=False, level=ProtocolLevel.MQTT_5, receive_maximum=receive_maximum
    )


def drain_client_wal(
    url: str,
    client_id: str,
    count: int,
    mqtt5: bool,
    receive_maximum: int,
    timeout: float,
    stall: float,
) -> dict[str, Any]:
    """The receiver's pipeline without the receiver: per socket read, one WAL append (one
    fsync), then the read's acknowledgements in one write; stops once ``count`` records are
    durable, then reads the WAL back."""
    from connector.mqtt.driver import MqttClient
    from connector.wal import RecordTuple, WalReader
    from connector.wal.opening import open_writer

    root = Path(tempfile.mkdtemp(prefix="bench-flow-wal-"))
    wal_dir = root / "wal"
    seen, counters = _sequence_checker(count)
    appends = 0
    try:
        wal = open_writer(str(wal_dir))
        client = MqttClient(
            url, _session_config(client_id, mqtt5, receive_maximum), [(TOPIC_FILTER, 1)]
        )
        start = time.perf_counter()
        connected_event = client.connect()
        connected = last = time.perf_counter()
        if not connected_event.session_present:
            raise BenchError(f"the broker had no session for {client_id}")
        deadline = start + timeout
        while wal.next_offset < count:
            now = time.perf_counter()
            if now > deadline or now - last > stall:
                break
            read = client.poll(0.2)
            if not read.messages and not read.released:
                continue
            now_us = time.time_ns() // 1000
            records: list[RecordTuple] = [
                (m.topic, m.payload, m.qos, m.retain, m.dup, m.packet_id, now_us)
                for m in read.messages
            ]
            wal.append(records, released_qos2=read.released)
            client.acknowledge(read.messages, read.released)
            appends += 1
            last = time.perf_counter()
        stored = wal.next_offset
        client.disconnect()
        wal.close()
        for payload in WalReader(wal_dir).read(0, stored).payloads:
            _note(seen, counters, payload)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = _worker_result(counters, start, connected, last, client.connections)
    result.update(wal_records=stored, appends=appends)
    return result


def drain_receiver(
    url: str,
    client_id: str,
    count: int,
    mqtt5: bool,
    receive_maximum: int,
    timeout: float,
    stall: float,
) -> dict[str, Any]:
    """The source's receiver itself (``mqttVersion``, ``receiveMaximum``), as bench.drain's
    ``ours-wal`` peer runs it; refuses when its session lacks the arm's settings."""
    from connector.mqtt.packets import ProtocolLevel
    from connector.source.options import SourceOptions
    from connector.source.receiver import Receiver
    from connector.wal import WalReader

    root = Path(tempfile.mkdtemp(prefix="bench-flow-wal-"))
    wal_dir = root / "wal"
    raw = {
        "brokerUrl": url, "topic": TOPIC_FILTER, "qos": "1", "clientId": client_id,
        "walPath": str(wal_dir), "maxBacklogMessages": str(max(count, 10_000) * 2),
    }  # fmt: skip
    if mqtt5:
        raw.update(mqttVersion="5", receiveMaximum=str(receive_maximum))
    seen, counters = _sequence_checker(count)
    try:
        receiver = Receiver(SourceOptions.parse(raw))
        config = receiver.client.session.config
        wanted = (ProtocolLevel.MQTT_5, receive_maximum) if mqtt5 else (config.level, None)
        if (config.level, config.receive_maximum) != wanted:
            receiver.stop()
            raise BenchError(
                f"the receiver's session has level {config.level} and Receive Maximum "
                f"{config.receive_maximum}, not {wanted}: it does not take the MQTT 5 source "
                "options yet; use --drainer client-wal"
            )
        start = time.perf_counter()
        receiver.start()
        connected = time.perf_counter()
        try:
            last = wait_stored(receiver, count, start + timeout, stall)
        finally:
            receiver.stop()
        stored = receiver.wal.next_offset
        for payload in WalReader(wal_dir).read(0, stored).payloads:
            _note(seen, counters, payload)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = _worker_result(counters, start, connected, last, receiver.stats.connections)
    result.update(wal_records=stored, appends=None)
    return result


WORKERS = {"client-wal": drain_client_wal, "receiver": drain_receiver}


def run_worker(argv: Sequence[str]) -> int:
    """``python -m bench.flow_control worker DRAINER URL CLIENT_ID COUNT [--mqtt5
    --receive-maximum N]``: one JSON line out."""
    parser = argparse.ArgumentParser(prog="python -m bench.flow_control worker")
    parser.add_argument("drainer", choices=DRAINERS)
    parser.add_argument("url")
    parser.add_argument("client_id")
    parser.add_argument("count", type=int)
    parser.add_argument("--mqtt5", action="store_true")
    parser.add_argument("--receive-maximum", type=int, default=DEFAULT_RECEIVE_MAXIMUM)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--stall", type=float, default=10.0, help="give up after a silence")
    args = parser.parse_args(argv)
    result = WORKERS[args.drainer](
        args.url, args.client_id, args.count, args.mqtt5, args.receive_maximum, args.timeout,
        args.stall,
    )  # fmt: skip
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["distinct"] == args.count and not result["out_of_range"] else 1


# ------------------------------------------------------------------------------ parent side


@dataclass(slots=True)
class Run:
    """One drain of one backlog by one arm."""

    arm: str
    drain_seconds: float
    process_seconds: float
    broker_lag_seconds: float
    publish_rate: float
    peak_in_flight: int
    left_queued: int
    rtt_seconds: float | None
    details: dict[str, Any] = field(default_factory=dict)

    def rate(self, count: int) -> float:
        return count / self.drain_seconds

    def rate_after_connack(self, count: int) -> float:
        """The rate without the connect's round trip and the broker's resume of the session
        (mochi answers CONNACK once it has taken the session over)."""
        return count / (self.drain_seconds - self.details["connect_seconds"])

    def record(self, count: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rate": round(self.rate(count), 1),
            "drain_seconds": round(self.drain_seconds, 4),
            "process_seconds": round(self.process_seconds, 4),
            "broker_lag_seconds": round(self.broker_lag_seconds, 4),
            "broker_peak_in_flight": self.peak_in_flight,
            "left_queued": self.left_queued,
            "backlog_publish_rate": round(self.publish_rate),
        }
        if self.rtt_seconds is not None:
            out["rtt_ms"] = round(self.rtt_seconds * 1000, 3)
        for key in ("connect_seconds", "appends", "duplicates", "connections"):
            value = self.details.get(key)
            if value is not None:
                out[key] = round(value, 4) if isinstance(value, float) else value
        return out


def create_session(url: str, client_id: str, mqtt5: bool, receive_maximum: int) -> None:
    """A persistent session subscribed to the backlog's filter with QoS 1 (MQTT 5: a Session
    Expiry Interval that never ends), left at once."""
    from connector.mqtt.driver import MqttClient

    session = _session_config(client_id, mqtt5, receive_maximum)
    client = MqttClient(url, session, [(TOPIC_FILTER, 1)])
    if client.connect().session_present:
        raise BenchError(f"the broker already had a session for {client_id!r}")
    client.disconnect()


def mqtt_round_trip(url: str, attempts: int = 3) -> float:
    """The shortest of ``attempts`` CONNECT -> CONNACK exchanges of a throwaway clean client at
    ``url`` (the TCP handshake excluded): one MQTT round trip."""
    from connector.mqtt.decoder import StreamDecoder
    from connector.mqtt.encode import encode
    from connector.mqtt.packets import Connack, Connect, Disconnect

    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or 1883)
    best = float("inf")
    for attempt in range(attempts):
        with socket.create_connection(address, timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            decoder = StreamDecoder()
            start = time.perf_counter()
            sock.sendall(encode(Connect(f"bench-flow-rtt-{time.time_ns()}-{attempt}")))
            connack = None
            while connack is None:
                data = sock.recv(1 << 16)
                if not data:
                    raise BenchError(f"{url} closed the connection before CONNACK")
                connack = next((p for p in decoder.feed(data) if isinstance(p, Connack)), None)
            best = min(best, time.perf_counter() - start)
            sock.sendall(encode(Disconnect()))
    return best


def _run_worker(
    drainer: str, arm: Arm, url: str, client_id: str, count: int, receive_maximum: int,
    timeout: float,
) -> tuple[float, dict[str, Any]]:  # fmt: skip
    command = [
        sys.executable, "-m", "bench.flow_control", "worker", drainer, url, client_id,
        str(count), "--timeout", str(timeout),
    ]  # fmt: skip
    if arm.mqtt5:
        command += ["--mqtt5", "--receive-maximum", str(receive_maximum)]
    wall, details, done = spawn_worker(command, timeout + 60, f"arm {arm.key}")
    if done.returncode != 0:
        raise BenchError(
            f"arm {arm.key} got {details['distinct']} of {count} distinct messages before it "
            f"stalled or timed out (exit {done.returncode}): {details}\n{done.stderr}"
        )
    return wall, details


@contextlib.contextmanager
def _maybe_proxy(arm: Arm, broker_port: int, delay_ms: float, log: Path) -> Iterator[Any]:
    if not arm.proxied:
        yield None
        return
    from devtools.fault_proxy import DelayProxy

    with DelayProxy(broker_port, delay_ms, log_path=log) as proxy:
        yield proxy


def drain_once(
    arm: Arm,
    count: int,
    size: int,
    window: int,
    receive_maximum: int,
    delay_ms: float,
    timeout: float,
    drainer: str,
    workdir: Path,
) -> Run:
    """Fresh mochi with the in-flight window, fresh backlog in a persistent session of the
    arm's protocol, drained by a worker straight or through the delay proxy."""
    from devtools.interop_brokers import mochi_broker

    client_id = f"bench-flow-{arm.key}"
    broker = mochi_broker(workdir / "mochi", trace=False, inflight_v311=window)
    with broker:
        create_session(broker.url, client_id, arm.mqtt5, receive_maximum)
        publish_rate = publish_backlog(broker.url, count, size, timeout, topic=TOPIC)
        with _maybe_proxy(arm, broker.port, delay_ms, workdir / "delay-proxy.log") as proxy:
            url = broker.url if proxy is None else proxy.url
            rtt = None if proxy is None else mqtt_round_trip(proxy.url)
            ended_before = len(broker.windows_closed(client_id))
            wall, details = _run_worker(
                drainer, arm, url, client_id, count, receive_maximum, timeout
            )
            # The proxy stays up until the broker has read the DISCONNECT (and so every
            # acknowledgement before it): a resume before that would take the session over.
            waited = time.perf_counter()
            while len(closed := broker.windows_closed(client_id)) <= ended_before:
                if time.perf_counter() - waited > timeout:
                    raise BenchError(f"mochi never logged the end of {client_id}'s connection")
                time.sleep(0.005)
            lag = time.perf_counter() - waited
        last = closed[-1]
        if last.in_flight or last.queued:
            raise BenchError(f"arm {arm.key}: the broker ended the drain with {last}")
        left, _ = _left_in_session(broker.url, client_id)
        if broker.crashed:
            raise BenchError(f"mochi crashed:\n{broker.log_text()[-4000:]}")
    return Run(
        arm.key, details["drain_seconds"], wall, lag, publish_rate, last.peak_in_flight, left,
        rtt, details,
    )  # fmt: skip


def check_run(run: Run, count: int, window: int, receive_maximum: int) -> None:
    """Every message stored once, nothing left, the broker kept to the window."""
    d = run.details
    if d.get("distinct") != count or d.get("out_of_range") or d.get("wal_records") != count:
        raise BenchError(f"arm {run.arm} stored {d}, expected {count} distinct messages")
    if run.left_queued:
        raise BenchError(f"arm {run.arm} left {run.left_queued} message(s) in the session")
    limit = receive_maximum if ARM_BY_KEY[run.arm].mqtt5 else window
    if run.peak_in_flight > limit:
        raise BenchError(
            f"arm {run.arm}: the broker had {run.peak_in_flight} messages in flight, more than "
            f"the window of {limit}"
        )


def arm_rates(runs: Sequence[Run], count: int) -> list[float]:
    return [run.rate(count) for run in runs]


def compute_ratios(rates: dict[str, list[float]]) -> dict[str, Stats]:
    """The ratios of ``RATIOS`` whose arms both ran, paired by repetition."""
    return {
        ratio_name(top, bottom): paired_ratio(rates[top], rates[bottom])
        for top, bottom, _ in RATIOS
        if top in rates and bottom in rates
    }


def goals(ratios: dict[str, Stats]) -> dict[str, dict[str, Any]]:
    out = {}
    for top, bottom in GOALS:
        name = ratio_name(top, bottom)
        if name in ratios:
            measured = ratios[name].median
            out[name] = {
                "ratio": name,
                "target": GOAL,
                "measured": round(measured, 3),
                "met": measured >= GOAL,
            }
    return out


def cap(window: int, rtt_seconds: float) -> float:
    """The most messages per second a window allows over a round trip."""
    return window / rtt_seconds


def receiver_takes_mqtt5() -> bool:
    """Whether the source options carry ``mqttVersion`` 5 and ``receiveMaximum`` (the receiver
    then drains the MQTT 5 arms itself)."""
    from connector.mqtt.packets import ProtocolLevel
    from connector.source.options import SourceOptions

    raw = {"brokerUrl": "tcp://127.0.0.1:1883", "topic": TOPIC_FILTER, "clientId": "probe",
           "walPath": "/nonexistent/wal", "mqttVersion": "5", "receiveMaximum": "1234"}  # fmt: skip
    try:
        options = SourceOptions.parse(raw)
    except ValueError:
        return False
    taken = (getattr(options, "mqtt_version", None), getattr(options, "receive_maximum", None))
    return taken == (ProtocolLevel.MQTT_5, 1234)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flow_control", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="backlog size")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the four arms")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (>= 10)")
    parser.add_argument(
        "--delay-ms", type=float, default=DEFAULT_DELAY_MS, help="proxy delay each way (ms)"
    )
    parser.add_argument(
        "--window", type=int, default=DEFAULT_WINDOW,
        help="the broker's in-flight window for 3.1.1 clients (mochi -inflight-v311)",
    )  # fmt: skip
    parser.add_argument(
        "--receive-maximum", type=int, default=DEFAULT_RECEIVE_MAXIMUM,
        help="the MQTT 5 arms' Receive Maximum (1..65535)",
    )  # fmt: skip
    parser.add_argument(
        "--arms", nargs="+", choices=sorted(ARM_BY_KEY), default=[arm.key for arm in ARMS]
    )
    parser.add_argument(
        "--drainer", choices=("auto", *DRAINERS), default="auto",
        help="receiver, client-wal, or auto: the receiver when it takes the MQTT 5 settings",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=300.0, help="per step, in seconds")
    parser.add_argument("--output", type=Path, default=RESULTS_FILE, help="results file")
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.messages < 1 or args.repeat < 1 or args.size < SEQUENCE_DIGITS:
        parser.error("--messages and --repeat must be >= 1, --size >= 10")
    if not 1 <= args.window <= 0xFFFF or not 1 <= args.receive_maximum <= 0xFFFF:
        parser.error("--window and --receive-maximum must be 1..65535")
    if not args.delay_ms > 0:
        parser.error("--delay-ms must be > 0")
    args.arms = [arm.key for arm in ARMS if arm.key in args.arms]
    if args.drainer == "auto":
        args.drainer = "receiver" if receiver_takes_mqtt5() else "client-wal"
    return args


def results_data(
    args: argparse.Namespace, info: dict[str, Any], runs: dict[str, list[Run]]
) -> dict[str, Any]:
    """What goes into the results file."""
    n = args.messages
    rtt_ms = 2 * args.delay_ms
    rates = {key: arm_rates(arm_runs, n) for key, arm_runs in runs.items()}
    ratios = compute_ratios(rates)
    measured_rtts = [r.rtt_seconds for arm_runs in runs.values() for r in arm_runs if r.rtt_seconds]
    arms = {}
    for key, arm_runs in runs.items():
        arm = ARM_BY_KEY[key]
        appends = [r.details["appends"] for r in arm_runs if r.details.get("appends")]
        arms[key] = {
            "title": arm.title(rtt_ms),
            "protocol": "5" if arm.mqtt5 else "3.1.1",
            "path": "proxy" if arm.proxied else "loopback",
            "window": args.receive_maximum if arm.mqtt5 else args.window,
            "rates": Stats.of(rates[key]).as_dict(1),
            "rates_after_connack": Stats.of(r.rate_after_connack(n) for r in arm_runs).as_dict(1),
            "messages_per_append_median": (
                round(Stats.of(n / a for a in appends).median, 1) if appends else None
            ),
            "broker_peak_in_flight": max(r.peak_in_flight for r in arm_runs),
            "runs": [r.record(n) for r in arm_runs],
        }
    data: dict[str, Any] = {
        "benchmark": "flow_control",
        "machine": info,
        "parameters": {
            "messages": n,
            "qos": 1,
            "payload_bytes": args.size,
            "repeat": args.repeat,
            "delay_ms_each_way": args.delay_ms,
            "rtt_ms": rtt_ms,
            "window_v311": args.window,
            "receive_maximum": args.receive_maximum,
            "drainer": args.drainer,
            "broker": f"mochi-mqtt 2.7.9 (tools/mochi-broker -inflight-v311 {args.window})",
            "proxy": f"python -m devtools.delay_proxy --delay-ms {args.delay_ms:g}",
            "topic": TOPIC,
            "topic_filter": TOPIC_FILTER,
            "publisher": "python -m connector.mqtt pub --qos 1",
        },
        "unit": "messages/s",
        "clock": CLOCK,
        "clocks": {
            CLOCK: "inside the drain worker, from just before the connect (TCP, CONNECT, the "
            "broker's resume of the session, CONNACK) until the N-th message was appended to "
            "the WAL; the rates, ratios and goals use this clock",
            CLOCK_AFTER_CONNACK: "the same without the connect: from CONNACK on",
        },
        "arms": arms,
        "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
        "ratio_meanings": {
            ratio_name(top, bottom): meaning
            for top, bottom, meaning in RATIOS
            if ratio_name(top, bottom) in ratios
        },
        "goals": goals(ratios),
        "v311_cap": {
            "nominal": round(cap(args.window, rtt_ms / 1000), 1),
            "measured_rtt_ms": (
                round(Stats.of(measured_rtts).median * 1000, 3) if measured_rtts else None
            ),
            "at_measured_rtt": (
                round(cap(args.window, Stats.of(measured_rtts).median), 1)
                if measured_rtts
                else None
            ),
        },
    }
    return data


def print_summary(data: dict[str, Any]) -> None:
    params = data["parameters"]
    print(f"bench.flow_control: {describe_machine(data['machine'])}")
    print(
        f"backlog of {params['messages']:,} QoS 1 messages ({params['payload_bytes']}-byte "
        f"payloads) per drain, {params['broker']}, proxy {params['delay_ms_each_way']:g} ms "
        f"each way, MQTT 5 Receive Maximum {params['receive_maximum']}, drainer "
        f"{params['drainer']}, median of {params['repeat']}; every drain verified (N distinct "
        "messages in the WAL, nothing left in the session, the broker within its window)"
    )
    print()
    arms = list(data["arms"].values())
    per_append = any(item["messages_per_append_median"] for item in arms)
    rows = []
    for item in arms:
        st = item["rates"]
        row = [
            item["title"], rate(st["median"]), rate(st["min"]), rate(st["max"]),
            rate(item["rates_after_connack"]["median"]),
        ]  # fmt: skip
        if per_append:
            row.append(f"{item['messages_per_append_median'] or 0:,.1f}")
        rows.append([*row, str(item["broker_peak_in_flight"])])
    headers = [f"arm ({CLOCK})", "msg/s median", "min", "max", "from CONNACK"]
    headers += ["msgs/append"] if per_append else []
    print(format_table([*headers, "peak in flight"], rows))
    print()
    if data["ratios"]:
        print(format_table(
            ["ratio (paired by repetition)", "median", "min", "max", "meaning"],
            [[name, ratio(r["median"]), ratio(r["min"]), ratio(r["max"]),
              data["ratio_meanings"][name]] for name, r in data["ratios"].items()],
        ))  # fmt: skip
        print()
    v311 = data["v311_cap"]
    if v311["measured_rtt_ms"] is not None:
        print(
            f"3.1.1 cap: window {params['window_v311']} / RTT: {rate(v311['nominal'])} msg/s at "
            f"{params['rtt_ms']:g} ms, {rate(v311['at_measured_rtt'])} msg/s at the measured "
            f"{v311['measured_rtt_ms']:.2f} ms"
        )
    for name, goal in data["goals"].items():
        verdict = "met" if goal["met"] else "NOT met"
        print(f"goal {name} >= {goal['target']:g}x: {goal['measured']:.2f}x -> {verdict}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return run_worker(argv[1:])
    args = parse_args(argv)
    info = machine_info()
    runs: dict[str, list[Run]] = {key: [] for key in args.arms}
    workroot = Path(tempfile.mkdtemp(prefix="bench-flow-control-"))
    try:
        for rep in range(args.repeat):
            order = args.arms[rep % len(args.arms) :] + args.arms[: rep % len(args.arms)]
            for key in order:
                workdir = workroot / f"rep{rep}-{key}"
                run = drain_once(
                    ARM_BY_KEY[key], args.messages, args.size, args.window,
                    args.receive_maximum, args.delay_ms, args.timeout, args.drainer, workdir,
                )  # fmt: skip
                check_run(run, args.messages, args.window, args.receive_maximum)
                runs[key].append(run)
                sys.stderr.write(
                    f"repetition {rep + 1}, arm {key}: {rate(run.rate(args.messages))} msg/s\n"
                )
    except (BenchError, subprocess.TimeoutExpired, RuntimeError, OSError) as exc:
        # RuntimeError covers the broker and proxy helpers' errors (e.g. mochi not built).
        sys.stderr.write(f"bench.flow_control: {exc}\n(work files kept in {workroot})\n")
        return 1
    shutil.rmtree(workroot, ignore_errors=True)
    data = results_data(args, info, runs)
    print_summary(data)
    path = write_results("flow_control", data, args.output)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
