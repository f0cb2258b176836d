"""Flow control over a long round trip (``python -m bench.flow_control``): a backlog drained into
a WAL over MQTT 3.1.1 and 5, on loopback and through ``devtools.fault_proxy`` (10 ms each way),
from a mochi-mqtt broker that keeps its in-flight window (3.1.1: 20; MQTT 5: Receive Maximum);
the four arms in turns, ratios paired by repetition."""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connector.mqtt.packets import ProtocolLevel

from . import common, drainer
from .render import Charts, Lines, clock_notes, goals_table, md_table, num, ratio_rows, stats_cells

GOAL = 0.5
CLOCK = "connect -> last message durable"
CLOCK_AFTER_CONNACK = "CONNACK -> last message durable"


@dataclass(frozen=True)
class Arm:
    """One way of draining: protocol level and path to the broker."""

    key: str
    mqtt5: bool
    proxied: bool

    def title(self, rtt_ms: float) -> str:
        path = f"{rtt_ms:g} ms RTT (proxy)" if self.proxied else "loopback"
        return f"({self.key}) MQTT {'5' if self.mqtt5 else '3.1.1'}, {path}"


ARMS = {
    arm.key: arm
    for arm in (Arm("a", False, False), Arm("b", False, True), Arm("c", True, True),
                Arm("d", True, False))
}  # fmt: skip
RATIOS = {
    "(c)/(d)": "MQTT 5 over the long round trip / MQTT 5 on loopback",
    "(c)/(a)": "MQTT 5 over the long round trip / 3.1.1 on loopback",
    "(b)/(a)": "3.1.1 over the long round trip / 3.1.1 on loopback",
    "(c)/(b)": "MQTT 5 / 3.1.1, both over the long round trip",
    "(d)/(a)": "MQTT 5 / 3.1.1, both on loopback",
}
GOALS = ("(c)/(d)", "(c)/(a)")


@dataclass(slots=True)
class Run:
    """One drain of one backlog by one arm: the worker's figures (``details``)."""

    arm: str
    process_seconds: float
    broker_lag_seconds: float
    peak_in_flight: int
    left_queued: int
    rtt_seconds: float | None
    details: dict[str, Any]

    def rate(self, count: int, after_connack: bool = False) -> float:
        """The rate; ``after_connack``: without the connect and the broker's resume."""
        connect = self.details["connect_seconds"] if after_connack else 0.0
        return count / (self.details["drain_seconds"] - connect)


def mqtt_round_trip(url: str, attempts: int = 3) -> float:
    """The shortest of ``attempts`` CONNECT -> CONNACK exchanges at ``url``: one round trip."""
    from connector.mqtt.encode import encode
    from connector.mqtt.packets import Connack, Connect, Disconnect
    from connector.mqtt.receive_buffer import ReceiveBuffer

    parts = urlsplit(url)
    best = float("inf")
    for attempt in range(attempts):
        address = (parts.hostname or "127.0.0.1", parts.port or 1883)
        with socket.create_connection(address, timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            decoder = ReceiveBuffer()
            start = time.perf_counter()
            sock.sendall(encode(Connect(f"bench-flow-rtt-{time.time_ns()}-{attempt}")))
            connack = None
            while connack is None:
                data = sock.recv(1 << 16)
                if not data:
                    raise common.BenchError(f"{url} closed the connection before CONNACK")
                connack = next((p for p in decoder.feed(data) if isinstance(p, Connack)), None)
            best = min(best, time.perf_counter() - start)
            sock.sendall(encode(Disconnect()))
    return best


def drain_once(arm: Arm, args: Any, workdir: Path) -> Run:
    """Fresh mochi and backlog of the arm's protocol, drained straight or through the proxy."""
    from devtools.fault_proxy import DelayProxy
    from devtools.interop_brokers import mochi_broker

    count, timeout = args.messages, args.timeout
    client_id = f"bench-flow-{arm.key}"
    broker = mochi_broker(workdir / "mochi", trace=False, inflight_v311=args.window)
    options = ["mqttVersion=5", f"receiveMaximum={args.receive_maximum}"] if arm.mqtt5 else []
    with broker, contextlib.ExitStack() as stack:
        level = ProtocolLevel.MQTT_5 if arm.mqtt5 else ProtocolLevel.MQTT_3_1_1
        common.create_session(broker.url, client_id, drainer.TOPIC_FILTER, level=level)
        publish_rate = drainer.publish_numbered(broker.url, count, args.size, timeout)
        url, rtt = broker.url, None
        if arm.proxied:
            log = workdir / "delay-proxy.log"
            url = stack.enter_context(DelayProxy(broker.port, args.delay_ms, log_path=log)).url
            rtt = mqtt_round_trip(url)
        ended_before = len(broker.windows_closed(client_id))
        wall, details = drainer.run(
            "ours-wal", url, client_id, count, timeout, stall=10.0, options=options
        )
        # The proxy stays up until the broker has read the DISCONNECT (and so every
        # acknowledgement before it): a resume before that would take the session over.
        lag = common.wait_for(
            lambda: len(broker.windows_closed(client_id)) > ended_before, timeout,
            lambda: f"mochi never logged the end of {client_id}'s connection", 0.005,
        )  # fmt: skip
        stack.close()
        last = broker.windows_closed(client_id)[-1]
        if last.in_flight or last.queued:
            raise common.BenchError(f"arm {arm.key}: the broker ended the drain with {last}")
        left, _ = drainer.left_in_session(broker.url, client_id)
        common.check_broker(broker)
    details["backlog_publish_rate"] = round(publish_rate)
    return Run(arm.key, wall, lag, last.peak_in_flight, left, rtt, details)


def check_run(run: Run, count: int, window: int, receive_maximum: int) -> None:
    """Every message stored once, nothing left, the broker kept to the window."""
    d = run.details
    if d.get("distinct") != count or d.get("out_of_range") or d.get("wal_records") != count:
        raise common.BenchError(f"arm {run.arm} stored {d}, expected {count} distinct messages")
    if run.left_queued:
        raise common.BenchError(f"arm {run.arm} left {run.left_queued} message(s) in the session")
    limit = receive_maximum if ARMS[run.arm].mqtt5 else window
    if run.peak_in_flight > limit:
        raise common.BenchError(
            f"arm {run.arm}: the broker had {run.peak_in_flight} messages in flight, more than "
            f"the window of {limit}"
        )


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = common.arguments(
        "flow_control", __doc__, messages=20_000, repeat=3, size=100, timeout=300.0
    )
    parser.add_argument("--delay-ms", type=float, default=10.0, help="proxy delay each way (ms)")
    parser.add_argument("--window", type=int, default=20, help="mochi -inflight-v311")
    parser.add_argument("--receive-maximum", type=int, default=0xFFFF, help="of the MQTT 5 arms")
    parser.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=list(ARMS))
    args = parser.parse_args(argv)
    if not 1 <= args.window <= 0xFFFF or not 1 <= args.receive_maximum <= 0xFFFF:
        parser.error("--window and --receive-maximum must be 1..65535")
    if not args.delay_ms > 0:
        parser.error("--delay-ms must be > 0")
    args.arms = [key for key in ARMS if key in args.arms]
    return args


def results_data(args: Any, info: dict[str, Any], runs: dict[str, list[Run]]) -> dict[str, Any]:
    """What goes into the results file."""
    n, rtt_ms = args.messages, 2 * args.delay_ms
    rates = {key: [run.rate(n) for run in arm_runs] for key, arm_runs in runs.items()}
    ratios = {  # "(c)/(d)": the arms at 1 and 5
        name: common.paired_ratio(rates[name[1]], rates[name[5]])
        for name in RATIOS
        if {name[1], name[5]} <= rates.keys()
    }
    measured = [r.rtt_seconds for arm_runs in runs.values() for r in arm_runs if r.rtt_seconds]
    rtt = common.Stats.of(measured).median if measured else None
    arms = {
        key: {
            "title": ARMS[key].title(rtt_ms),
            "rates": common.Stats.of(rates[key]).as_dict(1),
            "rates_after_connack": common.Stats.of(r.rate(n, True) for r in arm_runs).as_dict(1),
            "broker_peak_in_flight": max(r.peak_in_flight for r in arm_runs),
            "runs": [
                {"broker_lag_seconds": round(r.broker_lag_seconds, 4), "rtt_seconds": r.rtt_seconds,
                 "broker_peak_in_flight": r.peak_in_flight, **r.details}
                for r in arm_runs
            ],
        }
        for key, arm_runs in runs.items()
    }  # fmt: skip
    params = {
        "messages": n, "payload_bytes": args.size, "repeat": args.repeat,
        "delay_ms_each_way": args.delay_ms, "rtt_ms": rtt_ms, "window_v311": args.window,
        "receive_maximum": args.receive_maximum, "drainer": "receiver",
        "broker": f"mochi-mqtt 2.7.9 (tools/mochi-broker -inflight-v311 {args.window})",
    }  # fmt: skip
    return {
        "machine": info,
        "parameters": params,
        "clocks": {
            CLOCK: "inside the drain worker, from just before the connect (TCP, CONNECT, the "
            "broker's resume of the session, CONNACK) until the N-th message was appended to "
            "the WAL; the rates, ratios and goals use this clock",
            CLOCK_AFTER_CONNACK: "the same without the connect: from CONNACK on",
        },
        "arms": arms,
        "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
        "ratio_meanings": {name: RATIOS[name] for name in ratios},
        "goals": {
            name: common.goal(name, GOAL, ratios[name].median) for name in GOALS if name in ratios
        },
        "v311_cap": {
            "nominal": round(args.window / (rtt_ms / 1000), 1),
            "measured_rtt_ms": None if rtt is None else round(rtt * 1000, 3),
            "at_measured_rtt": None if rtt is None else round(args.window / rtt, 1),
        },
    }


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    rtt = params.get("rtt_ms")
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} QoS 1 messages "
        f"({params.get('payload_bytes')}-byte payloads), drained into a write-ahead log (one "
        "append with one fsync per socket read, then that read's acknowledgements; drainer "
        f"`{params.get('drainer')}`) from {params.get('broker')}: at most "
        f"{params.get('window_v311')} unacknowledged messages to a 3.1.1 client, at most its "
        f"Receive Maximum ({num(params.get('receive_maximum'))} here) to an MQTT 5 client. "
        "Straight on loopback, or through `devtools.fault_proxy` (a separate process) adding "
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
    args = parse_args(argv)

    def measure() -> dict[str, Any]:
        info = common.machine_info()
        runs: dict[str, list[Run]] = {key: [] for key in args.arms}
        workroot = Path(tempfile.mkdtemp(prefix="bench-flow-control-"))
        for rep, key in common.in_turns(args.arms, args.repeat):
            run = drain_once(ARMS[key], args, workroot / f"rep{rep}-{key}")
            check_run(run, args.messages, args.window, args.receive_maximum)
            runs[key].append(run)
            print(f"repetition {rep + 1}, arm {key}: {num(run.rate(args.messages))} msg/s")
        shutil.rmtree(workroot, ignore_errors=True)  # kept when a run failed
        return results_data(args, info, runs)

    return common.finish("flow_control", measure, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
