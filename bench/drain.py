"""Backlog drain rate (``python -m bench.drain [--qos 2]``): a persistent session's queued
messages on a fresh Mosquitto, drained by ``bench.drainer``'s ``ours``, ``ours-wal`` and
``paho`` and by ``mosquitto_sub``, in turns, on three clocks; the broker must hold nothing after.
QoS 2 (at most 65,535 messages) drains until every exchange is complete."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import common, drainer
from .drainer import TOPIC_FILTER
from .render import Charts, Lines, clock_notes, goals_table, num, peer_clock_table, ratios_table

PEERS = ("ours", "ours-wal", "paho", "mosquitto_sub")
DEFAULT_MESSAGES = {1: 100_000, 2: 60_000}
QOS2_MAX_MESSAGES = 65_535
IN_PROCESS = "connect -> last message"
COMPLETE = "connect -> exchanges complete"  # QoS 2 only
PROCESS = "process start -> exit"
ACKNOWLEDGED = "process start -> broker done"
CLOCKS = {
    1: {
        IN_PROCESS: "inside the drain process, from the connect call to the last message",
        PROCESS: "wall time of the drain process",
        ACKNOWLEDGED: "process start until the broker logged the end of its connection, i.e. it "
        "had read every acknowledgement",
    },
    2: {
        IN_PROCESS: "inside the drain process, from the connect call to the last message (ours: "
        "last PUBLISH read; ours-wal: last message durable in the WAL; paho: last PUBREL read, "
        "paho hands a QoS 2 message over once it is released)",
        COMPLETE: "inside the drain process, from the connect call until every QoS 2 exchange "
        "was complete (ours, paho: last PUBCOMP written; ours-wal: no QoS 2 id pending in the "
        "WAL, i.e. every release recorded, the PUBCOMPs follow at once)",
        PROCESS: "wall time of the drain process",
        ACKNOWLEDGED: "process start until the broker logged the end of its connection, i.e. it "
        "had read every PUBREC and PUBCOMP",
    },
}
VERSUS_SUB = f"({IN_PROCESS}) / mosquitto_sub ({PROCESS})"
GOALS = (
    ("ours/paho", 2.5, f"ours/paho, {IN_PROCESS}"),
    ("ours/mosquitto_sub", 0.7, f"ours {VERSUS_SUB}"),
    ("ours-wal/mosquitto_sub", 0.8, f"ours-wal {VERSUS_SUB}"),
)
NO_GOALS_QOS2 = (
    "no goals at QoS 2: the drain goals are QoS 1 goals, and Mosquitto 2.0.11 redelivers a "
    "QoS 2 backlog very slowly to clients that answer each PUBREL at once "
    "(eclipse-mosquitto/mosquitto#2306), so mosquitto_sub and paho are slow peers here"
)


@dataclass(slots=True)
class Drain:
    """One peer's drain of one backlog."""

    peer: str
    process_seconds: float
    broker_lag_seconds: float
    details: dict[str, Any]

    @property
    def acknowledged_seconds(self) -> float:
        """Process start until the broker logged the end of the drain's connection."""
        return self.process_seconds + self.broker_lag_seconds


def _connections_ended(broker: Any, client_id: str) -> int:
    """How many connections of ``client_id`` the broker has logged as ended."""
    name = re.escape(client_id)
    pattern = rf"Client {name} (?:disconnected|closed its connection)|Socket error on client {name}"
    return len(re.findall(pattern, broker.log_text()))


def drain_once(peer: str, count: int, size: int, inflight: int, timeout: float, qos: int) -> Drain:
    """Fresh broker, fresh backlog of ``count`` QoS ``qos`` messages, drained by ``peer``."""
    client_id = f"bench-drain-{peer}"
    queued = drainer.backlog(
        count, [(client_id, TOPIC_FILTER)],
        lambda url: drainer.publish_numbered(url, count, size, timeout, qos, inflight),
        qos=qos, inflight=inflight,
    )  # fmt: skip
    with queued.broker as broker:
        details: dict[str, Any] = {}
        gone_before = _connections_ended(broker, client_id)
        if peer == "mosquitto_sub":
            start = time.perf_counter()
            done = subprocess.run(
                drainer.command(peer, broker.url, client_id, count, timeout, qos=qos),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout,
            )  # fmt: skip
            if done.returncode != 0:
                raise common.BenchError(f"mosquitto_sub failed ({done.returncode}): {done.stderr}")
            wall = time.perf_counter() - start
        else:
            wall, details = drainer.run(peer, broker.url, client_id, count, timeout, qos=qos)
        # A new connection with the same client id before the broker has seen the drain's
        # connection end would take the session over and discard its last acknowledgements.
        lag = common.wait_for(
            lambda: _connections_ended(broker, client_id) > gone_before, timeout,
            lambda: f"the broker never logged the end of {client_id}'s connection", 0.005,
        )  # fmt: skip
        left, resent = drainer.left_in_session(broker.url, client_id)
        common.check_broker(broker)
    if left or (qos == 2 and resent):
        raise common.BenchError(
            f"{peer} left {left} message(s) and {resent} PUBREL(s) in the session"
        )
    details.update(backlog_publish_rate=round(queued.publish_rate), left_queued=left)
    return Drain(peer, wall, lag, details)


def clock_rates(drains: list[Drain], count: int) -> dict[str, list[float]]:
    rates = {
        PROCESS: [count / d.process_seconds for d in drains],
        ACKNOWLEDGED: [count / d.acknowledged_seconds for d in drains],
    }
    for clock, key in ((IN_PROCESS, "drain_seconds"), (COMPLETE, "complete_seconds")):
        if all(d.details.get(key) for d in drains):
            rates[clock] = [count / d.details[key] for d in drains]
    return rates


def paired_ratios(rates: dict[str, dict[str, list[float]]], qos: int) -> dict[str, common.Stats]:
    """ours/peer per clock paired by repetition, and the goals' mixed comparisons."""
    clocks = list(CLOCKS[qos])
    ratios: dict[str, common.Stats] = {}
    for mine in ("ours", "ours-wal"):
        ours = rates.get(mine)
        if ours is None:
            continue
        for peer in ("paho", "mosquitto_sub"):
            for clock in clocks:
                if clock in ours and clock in rates.get(peer, {}):
                    ratios[f"{mine}/{peer}, {clock}"] = common.paired_ratio(
                        ours[clock], rates[peer][clock]
                    )
        for inside in (IN_PROCESS, COMPLETE):
            if inside in clocks and inside in ours and "mosquitto_sub" in rates:
                ratios[f"{mine} ({inside}) / mosquitto_sub ({PROCESS})"] = common.paired_ratio(
                    ours[inside], rates["mosquitto_sub"][PROCESS]
                )
    return ratios


def goals(ratios: dict[str, common.Stats]) -> dict[str, dict[str, Any]]:
    """The project's drain goals (QoS 1) that the run measured."""
    return {
        name: common.goal(key, target, ratios[key].median)
        for name, target, key in GOALS
        if key in ratios
    }


def parse_args(argv: Sequence[str] | None) -> Any:
    """The command line, with ``messages`` resolved for the QoS."""
    parser = common.arguments("drain", __doc__, messages=None, repeat=5, size=100, timeout=120.0)
    parser.add_argument("--qos", type=int, choices=(1, 2), default=1, help="QoS of the backlog")
    parser.add_argument("--inflight", type=int, default=20, help="mosquitto max_inflight_messages")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    args = parser.parse_args(argv)
    args.messages = args.messages or DEFAULT_MESSAGES[args.qos]
    if args.inflight < 0:
        parser.error("--inflight must be >= 0")
    if args.qos == 2 and args.messages > QOS2_MAX_MESSAGES:
        parser.error(
            f"--qos 2 takes at most {QOS2_MAX_MESSAGES:,} messages: Mosquitto 2.0.11 gives a "
            "queued message its packet id when it queues it"
        )
    return args


def results(args: Any, runs: dict[str, list[Drain]]) -> dict[str, Any]:
    qos = args.qos
    rates = {peer: clock_rates(found, args.messages) for peer, found in runs.items()}
    ratios = paired_ratios(rates, qos)
    return {
        "parameters": {
            "messages": args.messages, "qos": qos, "payload_bytes": args.size,
            "max_inflight_messages": args.inflight, "repeat": args.repeat,
        },
        "clocks": CLOCKS[qos],
        "peers": {
            peer: {
                "rates": {clock: common.Stats.of(v).as_dict(1) for clock, v in rates[peer].items()},
                "runs": [
                    {"process_seconds": round(d.process_seconds, 4),
                     "broker_lag_seconds": round(d.broker_lag_seconds, 4), **d.details}
                    for d in runs[peer]
                ],
            }
            for peer in runs
        },
        "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
        **({"goals": goals(ratios)} if qos == 1 else {"goals": {}, "goals_note": NO_GOALS_QOS2}),
    }  # fmt: skip


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    ending = (
        "drained by each peer until every exchange was complete (PUBREL received, PUBCOMP sent)"
        if params.get("qos") == 2
        else "drained and acknowledged by each peer"
    )
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} QoS "
        f"{params.get('qos')} messages ({params.get('payload_bytes')}-byte payloads) {ending} "
        f"on a fresh Mosquitto; median of {params.get('repeat')}.",
        "",
        *clock_notes(data),
        *peer_clock_table(data),
        "",
        *ratios_table(data.get("ratios")),
        "",
    ]
    if data.get("goals_note"):
        return [*out, f"*{data['goals_note']}.*"]
    return out + goals_table(data.get("goals"))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    peers: list[str] = list(dict.fromkeys(args.peers))

    def measure() -> dict[str, Any]:
        info = common.machine_info()
        runs: dict[str, list[Drain]] = {peer: [] for peer in peers}
        for _, peer in common.in_turns(peers, args.repeat):
            runs[peer].append(
                drain_once(peer, args.messages, args.size, args.inflight, args.timeout, args.qos)
            )
        return {"machine": info, **results(args, runs)}

    name = "drain" if args.qos == 1 else "drain_qos2"
    return common.finish(name, measure, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
