"""Backlog drain rate: a persistent session's queued QoS 1 (or 2) messages, read and acknowledged.

For every peer and repetition a fresh Mosquitto gets a fresh backlog (``bench.drainer``): a
``clean_session=False`` client connects, subscribes and leaves; ``python -m connector.mqtt pub``
publishes N numbered 100-byte messages and exits once every one is acknowledged, i.e. queued
for the offline session. Then one peer drains it: ``ours``, ``ours-wal`` and ``paho``, the
workers of ``bench.drainer``, and ``mosquitto_sub -c -i ID -q 1 -C N`` writing to /dev/null.

Three clocks: ``connect -> last message`` inside the process (the workers print it as JSON);
``process start -> exit`` for every peer; ``process start -> broker done``, until the broker
has logged the end of the drain's connection, i.e. it has read every acknowledgement (a fast
reader can leave the broker working through its PUBACKs after the process has gone). After
each drain, once the broker is done, a client resumes the session and counts what is still
queued, which must be 0. Goals (QoS 1 only): ours >= 0.7x and ours-wal >= 0.8x mosquitto_sub,
ours >= 2.5x paho. Results go to ``bench/results/drain.json``.

QoS 2 (``--qos 2``, ``bench/results/drain_qos2.json``): the session, the backlog and every peer
use QoS 2. The backlog defaults to 60,000 messages and may not exceed 65,535: Mosquitto 2.0.11
gives a queued message its packet id when it queues it, so a larger QoS 2 backlog would reuse
the ids of exchanges still open. A drain is finished once every exchange is complete (PUBREL
received, PUBCOMP sent), reported by one more in-process clock, ``connect -> exchanges
complete``; the after-drain check resumes the session with a bare socket and counts both the
messages and the PUBRELs the broker resends: both must be 0. No goals at QoS 2: Mosquitto
2.0.11 redelivers a QoS 2 backlog very slowly to a client that answers each PUBREL at once
(eclipse-mosquitto/mosquitto#2306), so mosquitto_sub and paho are slow peers there.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from . import drainer
from .common import RESULTS_DIR, BenchError, Stats, finish, machine_info, paired_ratio, turn
from .drainer import TOPIC, TOPIC_FILTER
from .render import Charts, Lines, clock_notes, goals_table, num, peer_clock_table, ratios_table

PEERS = ("ours", "ours-wal", "paho", "mosquitto_sub")
GOAL_VS_PAHO = 2.5
GOAL_VS_MOSQUITTO_SUB = 0.7
GOAL_WAL_VS_MOSQUITTO_SUB = 0.8
DEFAULT_MESSAGES = {1: 100_000, 2: 60_000}
QOS2_MAX_MESSAGES = 65_535
"""Largest QoS 2 backlog: Mosquitto 2.0.11 numbers a queued message when it queues it, and a
session has 65,535 packet ids."""

# What each clock covers. Every peer has the last two; mosquitto_sub reports no internal timing.
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
    drain_seconds: float | None
    broker_lag_seconds: float
    publish_rate: float
    left_queued: int
    details: dict[str, Any]
    left_releases: int | None = None
    """QoS 2: PUBRELs the broker resent when the session resumed (None: not counted)."""

    @property
    def acknowledged_seconds(self) -> float:
        """Process start until the broker logged the end of the drain's connection."""
        return self.process_seconds + self.broker_lag_seconds

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "process_seconds": round(self.process_seconds, 4),
            "drain_seconds": None if self.drain_seconds is None else round(self.drain_seconds, 4),
            "broker_lag_seconds": round(self.broker_lag_seconds, 4),
            "left_queued": self.left_queued,
        }
        if self.left_releases is not None:
            out["left_releases"] = self.left_releases
        out["backlog_publish_rate"] = round(self.publish_rate)
        for key, value in self.details.items():
            if key != "drain_seconds":
                out[key] = round(value, 4) if isinstance(value, float) else value
        return out


def _connections_ended(broker: Any, client_id: str) -> int:
    """How many connections of ``client_id`` the broker has logged as ended."""
    name = re.escape(client_id)
    pattern = rf"Client {name} (?:disconnected|closed its connection)|Socket error on client {name}"
    return len(re.findall(pattern, broker.log_text()))


def _drain_mosquitto_sub(url: str, client_id: str, count: int, timeout: float, qos: int) -> float:
    command = drainer.command("mosquitto_sub", url, client_id, count, timeout, qos=qos)
    start = time.perf_counter()
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise BenchError(f"mosquitto_sub failed ({done.returncode}): {done.stderr}")
    return time.perf_counter() - start


def drain_once(peer: str, count: int, size: int, inflight: int, timeout: float, qos: int) -> Drain:
    """Fresh broker, fresh backlog of ``count`` QoS ``qos`` messages, drained by ``peer``."""
    client_id = f"bench-drain-{peer}"
    queued = drainer.backlog(
        count,
        [(client_id, TOPIC_FILTER)],
        lambda url: drainer.publish_numbered(url, count, size, timeout, qos, inflight),
        qos=qos,
        inflight=inflight,
    )
    with queued.broker as broker:
        details: dict[str, Any] = {}
        gone_before = _connections_ended(broker, client_id)
        if peer == "mosquitto_sub":
            wall = _drain_mosquitto_sub(broker.url, client_id, count, timeout, qos)
        else:
            wall, details = drainer.run(peer, broker.url, client_id, count, timeout, qos=qos)
        # The broker may still be working through the last acknowledgements: a new connection
        # with the same client id before it has seen the drain's connection end would take
        # the session over and discard those.
        waited = time.perf_counter()
        while _connections_ended(broker, client_id) <= gone_before:
            if time.perf_counter() - waited > timeout:
                raise BenchError(f"the broker never logged the end of {client_id}'s connection")
            time.sleep(0.005)
        lag = time.perf_counter() - waited
        left, resent = drainer.left_in_session(broker.url, client_id)
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()}")
    drain = Drain(
        peer, wall, details.get("drain_seconds"), lag, queued.publish_rate, left, details,
        resent if qos == 2 else None,
    )  # fmt: skip
    if drain.left_queued:
        raise BenchError(f"{peer} left {drain.left_queued} message(s) unacknowledged")
    if drain.left_releases:
        raise BenchError(
            f"{peer} left {drain.left_releases} QoS 2 exchange(s) without PUBCOMP: the broker "
            "resent their PUBREL when the session resumed"
        )
    return drain


def clock_rates(drains: list[Drain], count: int) -> dict[str, list[float]]:
    rates = {
        PROCESS: [count / d.process_seconds for d in drains],
        ACKNOWLEDGED: [count / d.acknowledged_seconds for d in drains],
    }
    inside = [count / d.drain_seconds for d in drains if d.drain_seconds]
    if len(inside) == len(drains):
        rates[IN_PROCESS] = inside
    complete = [
        count / d.details["complete_seconds"] for d in drains if d.details.get("complete_seconds")
    ]
    if complete and len(complete) == len(drains):
        rates[COMPLETE] = complete
    return rates


def paired_ratios(rates: dict[str, dict[str, list[float]]], qos: int) -> dict[str, Stats]:
    """ours/peer per clock, paired by repetition, plus the goal's mixed comparison (at QoS 2
    also with ``connect -> exchanges complete``)."""
    clocks = list(CLOCKS[qos])
    ratios: dict[str, Stats] = {}
    for mine in ("ours", "ours-wal"):
        ours = rates.get(mine)
        if ours is None:
            continue
        for peer in ("paho", "mosquitto_sub"):
            for clock in clocks:
                if clock in ours and clock in rates.get(peer, {}):
                    ratios[f"{mine}/{peer}, {clock}"] = paired_ratio(
                        ours[clock], rates[peer][clock]
                    )
        for inside in (IN_PROCESS, COMPLETE):
            if inside in clocks and inside in ours and "mosquitto_sub" in rates:
                ratios[f"{mine} ({inside}) / mosquitto_sub ({PROCESS})"] = paired_ratio(
                    ours[inside], rates["mosquitto_sub"][PROCESS]
                )
    return ratios


def goals(ratios: dict[str, Stats]) -> dict[str, dict[str, Any]]:
    """The project's drain goals (QoS 1) that the run measured."""
    versus_sub = f"({IN_PROCESS}) / mosquitto_sub ({PROCESS})"
    wanted = (
        ("ours/paho", GOAL_VS_PAHO, f"ours/paho, {IN_PROCESS}"),
        ("ours/mosquitto_sub", GOAL_VS_MOSQUITTO_SUB, f"ours {versus_sub}"),
        ("ours-wal/mosquitto_sub", GOAL_WAL_VS_MOSQUITTO_SUB, f"ours-wal {versus_sub}"),
    )
    return {
        name: {
            "ratio": key,
            "target": target,
            "measured": round(ratios[key].median, 3),
            "met": ratios[key].median >= target,
        }
        for name, target, key in wanted
        if key in ratios
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line, checked, with ``messages`` and ``output`` resolved for the QoS."""
    parser = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__)
    parser.add_argument("--qos", type=int, choices=(1, 2), default=1, help="QoS of the backlog")
    parser.add_argument(
        "--messages",
        type=int,
        help=f"backlog size (default {DEFAULT_MESSAGES[1]:,}; with --qos 2 "
        f"{DEFAULT_MESSAGES[2]:,}, at most {QOS2_MAX_MESSAGES:,})",
    )
    parser.add_argument("--repeat", type=int, default=5, help="backlogs per peer")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (>= 10)")
    parser.add_argument("--inflight", type=int, default=20, help="mosquitto max_inflight_messages")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--timeout", type=float, default=120.0, help="per step, in seconds")
    parser.add_argument("--output", type=Path, help="results file (default: by QoS)")
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = DEFAULT_MESSAGES[args.qos]
    if args.messages < 1 or args.repeat < 1 or args.size < SEQUENCE_DIGITS or args.inflight < 0:
        parser.error("--messages and --repeat must be >= 1, --size >= 10, --inflight >= 0")
    if args.qos == 2 and args.messages > QOS2_MAX_MESSAGES:
        parser.error(
            f"--qos 2 takes at most {QOS2_MAX_MESSAGES:,} messages, got {args.messages:,}: "
            "Mosquitto 2.0.11 gives a queued message its packet id when it queues it, so a "
            "larger QoS 2 backlog would reuse the ids of exchanges still open"
        )
    if args.output is None:
        args.output = RESULTS_DIR / ("drain.json" if args.qos == 1 else "drain_qos2.json")
    return args


def results(args: argparse.Namespace, info: dict[str, Any], runs: dict[str, list[Drain]]) -> dict:
    qos = args.qos
    rates = {peer: clock_rates(found, args.messages) for peer, found in runs.items()}
    ratios = paired_ratios(rates, qos)
    data: dict[str, Any] = {
        "benchmark": "drain",
        "machine": info,
        "parameters": {
            "messages": args.messages,
            "qos": qos,
            "payload_bytes": args.size,
            "max_inflight_messages": args.inflight,
            "repeat": args.repeat,
            "topic": TOPIC,
            "topic_filter": TOPIC_FILTER,
            "publisher": " ".join(
                ["python -m connector.mqtt pub", *drainer.publisher_args(qos, args.inflight)]
            ),
        },
        "unit": "messages/s",
        "clocks": CLOCKS[qos],
        "peers": {
            peer: {
                "rates": {clock: Stats.of(v).as_dict(1) for clock, v in rates[peer].items()},
                "runs": [d.record() for d in runs[peer]],
            }
            for peer in runs
        },
        "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
        "goals": goals(ratios) if qos == 1 else {},
    }
    if qos == 2:
        data["goals_note"] = NO_GOALS_QOS2
    return data


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.drain``, QoS 1 or (``--qos 2``, finished once every exchange is complete) 2."""
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
    args = parse_args(sys.argv[1:] if argv is None else argv)
    peers: list[str] = list(dict.fromkeys(args.peers))
    info = machine_info()
    runs: dict[str, list[Drain]] = {peer: [] for peer in peers}
    try:
        for rep in range(args.repeat):
            for peer in turn(peers, rep):
                drain = drain_once(
                    peer, args.messages, args.size, args.inflight, args.timeout, args.qos
                )
                runs[peer].append(drain)
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        # RuntimeError covers the broker helpers' errors (e.g. a missing mosquitto_sub).
        sys.stderr.write(f"bench.drain: {exc}\n")
        return 1
    name = "drain" if args.qos == 1 else "drain_qos2"
    return finish(name, results(args, info, runs), args.output, section)


if __name__ == "__main__":
    sys.exit(main())
