"""Flow control over a long round trip: a backlog drained over MQTT 3.1.1 and MQTT 5 through a
proxy that adds 10 ms each way, against a broker that enforces its in-flight limit.

Why: a broker sends a client at most a fixed number of unacknowledged QoS 1/2 messages (the
in-flight window), so over a link with round-trip time RTT a drain reaches at most window / RTT
messages per second: Mosquitto 2.0.12+ keeps 20 per 3.1.1 client, EMQX 32, so a 3.1.1
subscriber 20 ms away gets about 1,000 msg/s. With MQTT 5 the client sets the window itself
(Receive Maximum in CONNECT; the default, 65,535, is the largest: a window W over a round trip
T allows at most W / T msg/s).

Each repetition drains four fresh backlogs, one per arm, in a rotated order: (a) MQTT 3.1.1 on
loopback; (b) MQTT 3.1.1 through the delay proxy (``devtools.delay_proxy``, a separate process
adding ``--delay-ms`` to every byte each way); (c) MQTT 5 through the proxy; (d) MQTT 5 on
loopback. The broker: mochi-mqtt 2.7.9 (``tools/mochi-broker``, built by ``make setup``) with
``-inflight-v311 --window``, a fresh one per drain: at most that many unacknowledged messages
per 3.1.1 client and at most the Receive Maximum per MQTT 5 client, a resumed session's backlog
included (tools/mochi-broker/window.go). Debian's Mosquitto 2.0.11 cannot serve here: it sends
a deep queue at once whatever ``max_inflight_messages`` says (eclipse-mosquitto/mosquitto#2306).

Per drain: a persistent session of the arm's protocol, N numbered 100-byte messages published
into it by ``python -m connector.mqtt pub``, then the source's receiver (``bench.drainer``'s
``ours-wal``; ``mqttVersion`` 5 and ``receiveMaximum`` for the MQTT 5 arms) resumes it in a
worker process and drains it into a fresh write-ahead log (one append with one fsync per socket
read, then its acknowledgements). Clock: from just before the connect to the append of the
N-th message. Checks: the WAL holds N distinct sequence numbers; the broker logged the end of
the connection with nothing in flight or queued, and its peak in flight; a bare client resuming
the session gets nothing. Before each proxied drain one CONNECT -> CONNACK through the proxy is
timed: ``window / RTT`` is the 3.1.1 cap (b) should sit at. Ratios, paired by repetition:
(c)/(d) and (c)/(a) (goal: >= 0.5 for both), (b)/(a), (c)/(b), (d)/(a).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connector.mqtt.cli import SEQUENCE_DIGITS

from . import drainer
from .common import (
    RESULTS_DIR,
    BenchError,
    Stats,
    create_session,
    finish,
    machine_info,
    paired_ratio,
    turn,
)
from .drainer import TOPIC, TOPIC_FILTER
from .render import Charts, Lines, clock_notes, goals_table, md_table, num, ratio_rows, stats_cells

DEFAULT_WINDOW = 20
"""Mosquitto 2.0.12+'s default ``max_inflight_messages`` for 3.1.1 clients."""
DEFAULT_RECEIVE_MAXIMUM = 0xFFFF
GOAL = 0.5
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
        for key in ("connect_seconds", "duplicates", "connections"):
            value = self.details.get(key)
            if value is not None:
                out[key] = round(value, 4) if isinstance(value, float) else value
        return out


def mqtt_round_trip(url: str, attempts: int = 3) -> float:
    """The shortest of ``attempts`` CONNECT -> CONNACK exchanges of a throwaway clean client at
    ``url`` (the TCP handshake excluded): one MQTT round trip."""
    from connector.mqtt.encode import encode
    from connector.mqtt.packets import Connack, Connect, Disconnect
    from connector.mqtt.receive_buffer import ReceiveBuffer

    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or 1883)
    best = float("inf")
    for attempt in range(attempts):
        with socket.create_connection(address, timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            decoder = ReceiveBuffer()
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


@contextlib.contextmanager
def _maybe_proxy(arm: Arm, broker_port: int, delay_ms: float, log: Path) -> Iterator[Any]:
    if not arm.proxied:
        yield None
        return
    from devtools.delay_proxy import DelayProxy

    with DelayProxy(broker_port, delay_ms, log_path=log) as proxy:
        yield proxy


def drain_once(arm: Arm, args: argparse.Namespace, workdir: Path) -> Run:
    """Fresh mochi with the in-flight window, fresh backlog in a persistent session of the
    arm's protocol, drained by a worker straight or through the delay proxy."""
    from tests.interop_brokers import mochi_broker

    count, timeout = args.messages, args.timeout
    client_id = f"bench-flow-{arm.key}"
    broker = mochi_broker(workdir / "mochi", trace=False, inflight_v311=args.window)
    options = ["mqttVersion=5", f"receiveMaximum={args.receive_maximum}"] if arm.mqtt5 else []
    with broker:
        create_session(broker.url, client_id, TOPIC_FILTER, mqtt5=arm.mqtt5)
        publish_rate = drainer.publish_numbered(broker.url, count, args.size, timeout)
        with _maybe_proxy(arm, broker.port, args.delay_ms, workdir / "delay-proxy.log") as proxy:
            url = broker.url if proxy is None else proxy.url
            rtt = None if proxy is None else mqtt_round_trip(proxy.url)
            ended_before = len(broker.windows_closed(client_id))
            wall, details = drainer.run(
                "ours-wal", url, client_id, count, timeout, stall=10.0, options=options
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
        left, _ = drainer.left_in_session(broker.url, client_id)
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


def compute_ratios(rates: dict[str, list[float]]) -> dict[str, Stats]:
    """The ratios of ``RATIOS`` whose arms both ran, paired by repetition."""
    return {
        ratio_name(top, bottom): paired_ratio(rates[top], rates[bottom])
        for top, bottom, _ in RATIOS
        if top in rates and bottom in rates
    }


def goals(ratios: dict[str, Stats]) -> dict[str, dict[str, Any]]:
    names = (ratio_name(top, bottom) for top, bottom in GOALS)
    return {
        name: {
            "ratio": name,
            "target": GOAL,
            "measured": round(ratios[name].median, 3),
            "met": ratios[name].median >= GOAL,
        }
        for name in names
        if name in ratios
    }


def cap(window: int, rtt_seconds: float) -> float:
    """The most messages per second a window allows over a round trip."""
    return window / rtt_seconds


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_control", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000, help="backlog size")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the four arms")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (>= 10)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="proxy delay each way (ms)")
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
    parser.add_argument("--timeout", type=float, default=300.0, help="per step, in seconds")
    parser.add_argument("--output", type=Path, default=RESULTS_FILE, help="results file")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.repeat < 1 or args.size < SEQUENCE_DIGITS:
        parser.error("--messages and --repeat must be >= 1, --size >= 10")
    if not 1 <= args.window <= 0xFFFF or not 1 <= args.receive_maximum <= 0xFFFF:
        parser.error("--window and --receive-maximum must be 1..65535")
    if not args.delay_ms > 0:
        parser.error("--delay-ms must be > 0")
    args.arms = [arm.key for arm in ARMS if arm.key in args.arms]
    return args


def results_data(
    args: argparse.Namespace, info: dict[str, Any], runs: dict[str, list[Run]]
) -> dict[str, Any]:
    """What goes into the results file."""
    n = args.messages
    rtt_ms = 2 * args.delay_ms
    rates = {key: [run.rate(n) for run in arm_runs] for key, arm_runs in runs.items()}
    ratios = compute_ratios(rates)
    measured = [r.rtt_seconds for arm_runs in runs.values() for r in arm_runs if r.rtt_seconds]
    rtt = Stats.of(measured).median if measured else None
    arms = {
        key: {
            "title": ARM_BY_KEY[key].title(rtt_ms),
            "protocol": "5" if ARM_BY_KEY[key].mqtt5 else "3.1.1",
            "path": "proxy" if ARM_BY_KEY[key].proxied else "loopback",
            "window": args.receive_maximum if ARM_BY_KEY[key].mqtt5 else args.window,
            "rates": Stats.of(rates[key]).as_dict(1),
            "rates_after_connack": Stats.of(r.rate_after_connack(n) for r in arm_runs).as_dict(1),
            "broker_peak_in_flight": max(r.peak_in_flight for r in arm_runs),
            "runs": [r.record(n) for r in arm_runs],
        }
        for key, arm_runs in runs.items()
    }
    return {
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
            "drainer": "receiver",
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
            "measured_rtt_ms": None if rtt is None else round(rtt * 1000, 3),
            "at_measured_rtt": None if rtt is None else round(cap(args.window, rtt), 1),
        },
    }


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """A backlog drained over MQTT 3.1.1 and 5, on loopback and through the delay proxy, from
    a broker that keeps an in-flight window."""
    params = data.get("parameters", {})
    rtt = params.get("rtt_ms")
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} QoS 1 messages "
        f"({params.get('payload_bytes')}-byte payloads), drained into a write-ahead log (one "
        "append with one fsync per socket read, then that read's acknowledgements; drainer "
        f"`{params.get('drainer')}`) from {params.get('broker')}: at most "
        f"{params.get('window_v311')} unacknowledged messages to a 3.1.1 client, at most its "
        f"Receive Maximum ({num(params.get('receive_maximum'))} here) to an MQTT 5 client. "
        "Straight on loopback, or through `devtools.delay_proxy` (a separate process) adding "
        f"{params.get('delay_ms_each_way'):g} ms each way ({rtt:g} ms round trip). The four "
        "arms alternate within each repetition, each with a fresh broker and backlog; median "
        f"of {params.get('repeat')}.",
        "",
        *clock_notes(data),
    ]
    rows = [
        [
            item["title"],
            *stats_cells(item["rates"]),
            num(item.get("rates_after_connack", {}).get("median")),
            num(item.get("broker_peak_in_flight")),
        ]
        for item in data["arms"].values()
    ]
    headers = ["arm", "msg/s median", "min", "max", "from CONNACK, median"]
    out += md_table([*headers, "broker's peak in flight"], rows)
    meanings = data.get("ratio_meanings", {})
    ratio_lines = [[*row, str(meanings.get(row[0], ""))] for row in ratio_rows(data.get("ratios"))]
    out += ["", *md_table(["ratio", "median", "min", "max", "what it compares"], ratio_lines)]
    cap = data.get("v311_cap", {})
    if cap.get("measured_rtt_ms") is not None:
        out += [
            "",
            f"The 3.1.1 window over the proxy allows at most {params.get('window_v311')} "
            f"messages per round trip: {num(cap.get('nominal'))} msg/s at {rtt:g} ms, "
            f"{num(cap.get('at_measured_rtt'))} msg/s at the {cap['measured_rtt_ms']:.2f} ms "
            "measured (median CONNECT -> CONNACK through the proxy before each drain).",
        ]
    return [*out, "", *goals_table(data.get("goals"))]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    info = machine_info()
    runs: dict[str, list[Run]] = {key: [] for key in args.arms}
    workroot = Path(tempfile.mkdtemp(prefix="bench-flow-control-"))
    try:
        for rep in range(args.repeat):
            for key in turn(args.arms, rep):
                run = drain_once(ARM_BY_KEY[key], args, workroot / f"rep{rep}-{key}")
                check_run(run, args.messages, args.window, args.receive_maximum)
                runs[key].append(run)
                rate = num(run.rate(args.messages))
                sys.stderr.write(f"repetition {rep + 1}, arm {key}: {rate} msg/s\n")
    except (BenchError, subprocess.TimeoutExpired, RuntimeError, OSError) as exc:
        # RuntimeError covers the broker and proxy helpers' errors (e.g. mochi not built).
        sys.stderr.write(f"bench.flow_control: {exc}\n(work files kept in {workroot})\n")
        return 1
    shutil.rmtree(workroot, ignore_errors=True)
    return finish("flow_control", results_data(args, info, runs), args.output, section)


if __name__ == "__main__":
    sys.exit(main())
