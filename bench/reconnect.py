"""Duplicates from one dropped connection: how many duplicate rows does a reconnect with
messages in flight produce on Mosquitto 2.0.11 (docs/delivery.md, last section)?

Each run, for one setting (QoS, the broker's ``max_inflight_messages``): a fresh Mosquitto; the
persistent session created by a receiver with the run's WAL; N numbered messages published by
``python -m connector.mqtt pub`` and queued for it; then ``connector.receiver.receiver.Receiver``
drains the backlog through a ``tests.chaos.proxy.ChaosProxy``, which cuts the link (reset both
ways) once ``--cut-at`` messages are stored. The receiver reconnects on its own; the run waits
(woken by each acknowledgement the receiver writes) until it connected again, every number
0..N-1 is in its WAL, at QoS 2 every exchange is complete, and it is idle for ``IDLE_SECONDS``.

Recorded per run: messages stored at the cut (the WAL's end right after ``cut()``) and on the
first connection (the read in progress at the cut, up to 1 MiB, and what was in the socket
buffer are stored after it); stored in total; duplicates (the total minus N); duplicates the
receiver counted (``possible_duplicates``); resends the session withheld
(``duplicates_dropped``); records stored with DUP=1; the numbers missing, which must be none. A
loss, an unfinished drain or a duplicate at QoS 2 (the pending-id rule withholds every resend of
a stored QoS 2 message) fails the benchmark. Settings alternate within each repetition.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import RESULTS_DIR, BenchError, Stats, finish, machine, turn
from .drainer import publish_numbered
from .payloads import Tally
from .render import (
    Charts,
    Lines,
    inflight_label,
    md_table,
    median_range,
    num,
    stats_cells,
)

TOPIC = "bench/reconnect/t"
TOPIC_FILTER = "bench/reconnect/#"
IDLE_SECONDS = 0.5
GIVE_UP_QUIET_SECONDS = 10.0
"""Reconnected and nothing arrived for this long with numbers missing: they are lost."""
MAX_MESSAGES = 65_535
"""At most one packet id per message: Mosquitto 2.0.11 numbers a queued message when it queues
it, so a larger backlog reuses ids and the receiver's count (latest message per id) misses
some duplicates; at QoS 2 it would reuse the ids of open exchanges."""
FIGURES = (
    "stored_at_cut",
    "stored_on_first_connection",
    "stored_total",
    "duplicates",
    "possible_duplicates",
    "duplicates_dropped",
    "seconds_cut_to_all_stored",
)


@dataclass(frozen=True, slots=True)
class Setting:
    qos: int
    inflight: int

    @property
    def name(self) -> str:
        return f"qos{self.qos}-inflight{self.inflight or '-unbounded'}"


class AckWatch:
    """Counts the receiver's acknowledgement writes and wakes waiters on each one; notes the
    WAL's end after the last append of messages that came on the first connection."""

    def __init__(self, receiver: Any) -> None:
        self.cond = threading.Condition()
        self.writes = 0
        self.first_connection_stored = 0
        original = receiver.client.acknowledge

        def acknowledge(messages: Any, released: Any = None) -> None:
            # The receiver's thread appends, then calls this; it reconnects only in poll(),
            # so these messages came on connection ``stats.connections``.
            original(messages, released)
            first = receiver.stats.connections <= 1
            with self.cond:
                if first:
                    self.first_connection_stored = receiver.wal.next_offset
                self.writes += 1
                self.cond.notify_all()

        receiver.client.acknowledge = acknowledge

    def wait(self, predicate: Callable[[], bool], deadline: float) -> bool:
        """Wait until ``predicate()`` holds, re-checking after each acknowledgement write (and
        at least every second, for a change no write follows); False at ``deadline``."""
        while True:
            with self.cond:
                seen = self.writes
            if predicate():  # outside the lock: it may read the WAL
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self.cond:
                if self.writes == seen:  # no write since the snapshot: wait for the next
                    self.cond.wait(min(left, 1.0))


class NumberTally(Tally):
    """Which sequence numbers the WAL holds, read incrementally up to its ``next_offset``."""

    __slots__ = ("dup_flagged", "read_to", "reader")

    def __init__(self, wal_path: Path, count: int) -> None:
        from connector.wal import WalReader

        super().__init__(count)
        self.reader = WalReader(str(wal_path))
        self.dup_flagged = 0
        """Records stored with DUP=1: resends, whether or not a copy was stored before."""
        self.read_to = 0

    def update(self, end: int) -> None:
        if end <= self.read_to:
            return
        columns = self.reader.read(self.read_to, end)
        self.dup_flagged += sum(columns.dup)
        for payload in columns.payloads:
            self.note(bytes(payload[:SEQUENCE_DIGITS]))
        self.read_to = end


def _options(url: str, wal: Path, client_id: str, qos: int) -> Any:
    from connector.options.source import SourceOptions

    return SourceOptions.parse(
        {
            "brokerUrl": url,
            "topic": TOPIC_FILTER,
            "qos": str(qos),
            "walPath": str(wal),
            "clientId": client_id,
            "keepAlive": "30",
        }
    )


def one_run(
    setting: Setting, count: int, cut_at: int, size: int, timeout: float, workdir: Path, tag: str
) -> dict[str, Any]:
    """One backlog, one cut, one reconnect; the run's figures. Raises BenchError on a loss."""
    from connector.receiver.receiver import Receiver
    from devtools.mosquitto import MosquittoBroker
    from tests.chaos.proxy import ChaosProxy

    base = workdir / tag
    wal = base / "wal"
    client_id = f"bench-reconnect-{tag}"
    broker = MosquittoBroker(
        base / "broker",
        max_inflight_messages=setting.inflight,
        max_queued_messages=max(1_000_000, 2 * count),
    )
    broker.start()
    try:
        setup = Receiver(_options(broker.url, wal, client_id, setting.qos))
        setup.start()  # the persistent session and its subscription
        setup.stop()
        publish_rate = publish_numbered(
            broker.url, count, size, timeout, setting.qos, setting.inflight, TOPIC
        )
        with ChaosProxy(("127.0.0.1", broker.port)) as proxy:
            receiver = Receiver(_options(proxy.url, wal, client_id, setting.qos))
            watch = AckWatch(receiver)
            tally = NumberTally(wal, count)
            started = time.monotonic()
            receiver.start()
            try:
                deadline = started + timeout
                if not watch.wait(
                    lambda: receiver.wal.next_offset >= cut_at or receiver.error is not None,
                    deadline,
                ):
                    raise BenchError(
                        f"{setting.name}: only {receiver.wal.next_offset} of {cut_at} "
                        f"messages stored before the cut within {timeout:g} s"
                    )
                receiver.check()
                stored_before_cut = receiver.wal.next_offset
                cut = proxy.cut()
                stored_at_cut = receiver.wal.next_offset
                cut_time = time.monotonic()
                if cut != 1:
                    raise BenchError(f"{setting.name}: the proxy cut {cut} links, expected 1")

                def finished() -> bool:
                    return tally.distinct == count and (
                        setting.qos < 2 or not receiver.wal.qos2_pending
                    )

                def settled() -> bool:
                    """Finished, failed, or reconnected with nothing arriving for
                    ``GIVE_UP_QUIET_SECONDS`` (what is missing then is lost)."""
                    if receiver.error is not None:
                        return True
                    tally.update(receiver.wal.next_offset)
                    if receiver.stats.connections < 2:
                        return False
                    quiet_for = time.monotonic() - receiver.last_activity
                    return finished() or quiet_for >= GIVE_UP_QUIET_SECONDS

                deadline = cut_time + timeout
                settled_in_time = watch.wait(settled, deadline)
                settled_time = time.monotonic()
                receiver.check()
                complete = finished()
                if complete:
                    receiver.wait_idle(IDLE_SECONDS, timeout=max(0.0, deadline - time.monotonic()))
                    receiver.check()
                done_time = time.monotonic()
                quiet_for = done_time - receiver.last_activity
                stored_total = receiver.wal.next_offset
                tally.update(stored_total)
                stats = receiver.stats
                record: dict[str, Any] = {
                    "setting": setting.name,
                    "qos": setting.qos,
                    "max_inflight_messages": setting.inflight,
                    "stored_before_cut": stored_before_cut,
                    "stored_at_cut": stored_at_cut,
                    "stored_on_first_connection": watch.first_connection_stored,
                    "stored_total": stored_total,
                    "duplicates": stored_total - count,
                    "possible_duplicates": stats.possible_duplicates,
                    "duplicates_dropped": stats.duplicates_dropped,
                    "stored_with_dup_flag": tally.dup_flagged,
                    "missing": count - tally.distinct,
                    "out_of_range": tally.out_of_range,
                    "connections": stats.connections,
                    "qos2_pending_at_end": len(receiver.wal.qos2_pending),
                    "seconds_to_cut": round(cut_time - started, 3),
                    "seconds_cut_to_all_stored": round(settled_time - cut_time, 3),
                    "backlog_publish_rate": round(publish_rate),
                }
            finally:
                receiver.stop()
        if not settled_in_time:
            raise BenchError(
                f"{setting.name}: not finished {timeout:g} s after the cut "
                f"({record['connections']} connection(s), {tally.distinct} of {count} numbers "
                f"stored); run: {json.dumps(record)}"
            )
        _check(record, tally, count, quiet_for)
        return record
    finally:
        broker.close()
        shutil.rmtree(base, ignore_errors=True)


def _check(record: dict[str, Any], tally: NumberTally, count: int, quiet_for: float) -> None:
    """The run's verdict: a loss (a number missing once the reconnected receiver went quiet),
    an unfinished drain, a foreign payload or a duplicate at QoS 2 fail the benchmark."""
    name = record["setting"]
    if tally.distinct != count:
        missing = tally.missing
        raise BenchError(
            f"{name}: LOST {len(missing)} of {count} messages (first missing: {missing[:10]}; "
            f"nothing arrived for {quiet_for:.1f} s after the reconnect); "
            f"run: {json.dumps(record)}"
        )
    if record["qos2_pending_at_end"] or quiet_for < IDLE_SECONDS:
        raise BenchError(f"{name}: the receiver did not finish; run: {json.dumps(record)}")
    if tally.out_of_range:
        raise BenchError(f"{name}: {tally.out_of_range} stored payloads are not the backlog's")
    if record["qos"] == 2 and record["duplicates"]:
        raise BenchError(
            f"{name}: {record['duplicates']} duplicates at QoS 2 (the pending-id rule withholds "
            f"every resend of a stored message); run: {json.dumps(record)}"
        )


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median/max of each figure over a setting's runs, plus totals of the checks."""
    summary: dict[str, Any] = {
        key: Stats.of(float(r[key]) for r in runs).as_dict(3) for key in FIGURES
    }
    summary["counted_exactly"] = sum(1 for r in runs if r["possible_duplicates"] == r["duplicates"])
    summary["runs"] = len(runs)
    summary["lost"] = sum(r["missing"] for r in runs)
    return summary


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.reconnect", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000, help="backlog N (default 20,000)")
    parser.add_argument(
        "--cut-at", type=int, default=5_000, help="cut the link once this many are stored"
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per setting (default 5)")
    parser.add_argument("--qos", type=int, nargs="+", choices=(1, 2), default=[1, 2])
    parser.add_argument(
        "--inflight", type=int, nargs="+", default=[20, 0],
        help="Mosquitto max_inflight_messages values (0: unbounded; default 20 0)",
    )  # fmt: skip
    parser.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per phase")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "reconnect.json")
    args = parser.parse_args(argv)
    if not 0 < args.cut_at < args.messages:
        parser.error("--cut-at must be between 0 and --messages")
    if args.messages > MAX_MESSAGES:
        parser.error(f"--messages may not exceed {MAX_MESSAGES:,} (one packet id per message)")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.size < SEQUENCE_DIGITS:
        parser.error(f"--size must hold the {SEQUENCE_DIGITS}-digit sequence number")
    if any(k < 0 for k in args.inflight):
        parser.error("--inflight values must be >= 0")
    return args


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Duplicates from one dropped connection, per QoS and ``max_inflight_messages``."""
    params = data.get("parameters", {})
    settings = data["settings"]
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} numbered messages "
        f"({params.get('payload_bytes')}-byte payloads) drained by the source's receiver "
        "through a TCP proxy on a fresh Mosquitto per run; the proxy cuts the link (reset both "
        f"ways) once {num(params.get('cut_at'))} messages are stored, the receiver reconnects "
        "and drains the rest. *Stored at the cut*: the WAL's end right after the cut; "
        "*on connection 1*: every message the first connection delivered (the read in "
        "progress at the cut, up to 1 MiB, and what was already in the receiver's socket "
        "buffer are stored after it); *duplicates*: rows stored minus N, every number "
        "0..N-1 checked present; *counted*: the receiver's `possibleDuplicates`; "
        "*withheld*: resends the session answered without storing (`duplicatesDropped`). "
        f"{params.get('repeat')} runs per setting, settings alternating.",
        "",
    ]
    rows = []
    for name, item in settings.items():
        summary = item["summary"]
        duplicates = summary["duplicates"]
        rows.append(
            [
                str(item.get("qos", name)),
                inflight_label(item.get("max_inflight_messages")),
                num(summary.get("runs")),
                *stats_cells(duplicates),
                median_range(summary.get("stored_at_cut")),
                median_range(summary.get("stored_on_first_connection")),
                median_range(summary.get("possible_duplicates")),
                median_range(summary.get("duplicates_dropped")),
                num(summary.get("lost")),
            ]
        )
    out += md_table(
        ["QoS", "max_inflight_messages", "runs", "duplicates median", "min", "max",
         "stored at the cut", "stored on connection 1", "counted", "withheld", "lost"],
        rows,
    )  # fmt: skip
    exact = [
        (item["summary"].get("counted_exactly"), item["summary"].get("runs"))
        for item in settings.values()
        if item.get("qos") == 1
    ]
    if exact and all(isinstance(c, int) for c, _ in exact):
        counted, runs = sum(c for c, _ in exact), sum(r for _, r in exact)
        out += [
            "",
            f"At QoS 1 the receiver's count equalled the duplicates in {counted} of {runs} "
            "runs (no packet id is reused below 65,536 messages).",
        ]
    runs = sorted(
        (r for item in settings.values() for r in item.get("runs", [])),
        key=lambda r: (r.get("repetition", 0), r.get("sequence", 0), str(r.get("setting"))),
    )
    if runs:
        out += [
            "",
            "Per run, in the order measured:",
            "",
            *md_table(
                ["repetition", "QoS", "max_inflight_messages", "stored at the cut",
                 "on connection 1", "stored in total", "duplicates", "counted", "withheld"],
                [
                    [
                        str(r.get("repetition")),
                        str(r.get("qos")),
                        inflight_label(r.get("max_inflight_messages")),
                        num(r.get("stored_at_cut")),
                        num(r.get("stored_on_first_connection")),
                        num(r.get("stored_total")),
                        num(r.get("duplicates")),
                        num(r.get("possible_duplicates")),
                        num(r.get("duplicates_dropped")),
                    ]
                    for r in runs
                ],
            ),
        ]  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    settings = [
        Setting(qos, inflight)
        for qos in dict.fromkeys(args.qos)
        for inflight in dict.fromkeys(args.inflight)
    ]
    info = machine()
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in settings}
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconnect-"))
    try:
        for rep in range(args.repeat):
            order = turn(settings, rep)
            for setting in order:
                record = one_run(
                    setting, args.messages, args.cut_at, args.size, args.timeout, workdir,
                    f"r{rep}-{setting.name}",
                )  # fmt: skip
                record["repetition"] = rep
                record["sequence"] = sum(len(r) for r in runs.values())  # the order measured
                runs[setting.name].append(record)
                print(f"rep {rep} {setting.name}: {record['duplicates']:,} duplicates", flush=True)
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        # RuntimeError covers the broker helpers' errors and a failed receiver (check()).
        sys.stderr.write(f"bench.reconnect: {exc}\n")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summaries = {name: summarize(r) for name, r in runs.items()}
    results: dict[str, Any] = {
        "benchmark": "reconnect",
        "command": " ".join(["python -m bench.reconnect", *argv]),
        "machine": info,
        "parameters": {
            "messages": args.messages,
            "cut_at": args.cut_at,
            "payload_bytes": args.size,
            "repeat": args.repeat,
            "qos": list(dict.fromkeys(args.qos)),
            "max_inflight_messages": list(dict.fromkeys(args.inflight)),
            "idle_seconds": IDLE_SECONDS,
            "topic": TOPIC,
            "topic_filter": TOPIC_FILTER,
            "publisher": "python -m connector.mqtt pub",
            "cut": "tests.chaos.proxy.ChaosProxy.cut(): every link closed with a reset",
        },
        "settings": {
            s.name: {
                "qos": s.qos,
                "max_inflight_messages": s.inflight,
                "summary": summaries[s.name],
                "runs": runs[s.name],
            }
            for s in settings
        },
    }
    return finish("reconnect", results, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
