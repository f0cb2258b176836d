"""Duplicates from one dropped connection: ``python -m bench.reconnect``.

``python -m bench.reconnect [--messages N] [--cut-at K] [--repeat R] [--qos 1 2]
[--inflight 20 0] [--size BYTES] [--timeout S] [--output FILE]``

The question: how many duplicate rows does a reconnect with messages in flight produce at
QoS 1 on Mosquitto 2.0.11 (docs/delivery.md, last section)? Each run, for one setting
(QoS, the broker's ``max_inflight_messages``):

1. a fresh Mosquitto (``devtools.mosquitto.MosquittoBroker``, its own config);
2. the persistent session is created first: a receiver with the run's WAL connects
   (``clean_session=False``), subscribes with the run's QoS and stops;
3. ``python -m connector.mqtt pub`` publishes N numbered messages (10-digit sequence number
   first) at that QoS and exits once each is acknowledged, i.e. queued for the session;
4. ``connector.source.receiver.Receiver`` drains the backlog through a
   ``tests.chaos.proxy.ChaosProxy`` in front of the broker; once ``--cut-at`` messages are
   stored the proxy cuts the link (``cut()``: reset both ways, a dropped connection);
5. the receiver reconnects on its own; the run waits (condition waits with a deadline,
   woken by each acknowledgement the receiver writes) until it connected a second time,
   every number 0..N-1 is in its WAL (read incrementally), at QoS 2 every exchange is
   complete (no id pending in the WAL), and it is idle (``wait_idle``: nothing arrived for
   ``IDLE_SECONDS``).

Recorded per run: messages stored when the cut came (``stored_at_cut``, the WAL's end read
right after ``cut()`` returned; ``stored_before_cut`` right before it); messages the first
connection delivered (``stored_on_first_connection``: the read in progress at the cut, up to 1
MiB, and what was already in the receiver's socket buffer are stored after it; taken from the
WAL's end after each acknowledgement of a first-connection read); messages stored in total;
duplicates (the total minus N, which equals the extra copies summed over the numbers, each
being present); duplicates counted by the receiver (``stats.possible_duplicates``); resends the
session withheld (``stats.duplicates_dropped``); records stored with DUP=1 (resends, some of
them first deliveries of messages lost in transit at the cut); the numbers missing, which must
be none. A loss fails the benchmark (exit status 1, no results written), as do an unfinished
drain and a duplicate at QoS 2 (a resend of a stored QoS 2 message carries a pending id and is
withheld: the pending-id rule). Settings alternate within each repetition (the order rotates),
so a drift in machine load hits them alike. Results go to ``bench/results/reconnect.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import (
    RESULTS_DIR,
    BenchError,
    Stats,
    describe_machine,
    format_table,
    machine_info,
    write_results,
)
from .drain import publish_backlog

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


class NumberTally:
    """Which sequence numbers the WAL holds, read incrementally up to its ``next_offset``."""

    def __init__(self, wal_path: Path, count: int) -> None:
        from connector.wal import WalReader

        self.reader = WalReader(str(wal_path))
        self.copies = [0] * count
        self.distinct = 0
        self.out_of_range = 0
        self.dup_flagged = 0
        """Records stored with DUP=1: resends, whether or not a copy was stored before."""
        self.read_to = 0

    def update(self, end: int) -> None:
        if end <= self.read_to:
            return
        copies = self.copies
        columns = self.reader.read(self.read_to, end)
        self.dup_flagged += sum(columns.dup)
        for payload in columns.payloads:
            try:
                seq = int(bytes(payload[:SEQUENCE_DIGITS]))
            except ValueError:
                self.out_of_range += 1
                continue
            if 0 <= seq < len(copies):
                if not copies[seq]:
                    self.distinct += 1
                copies[seq] += 1
            else:
                self.out_of_range += 1
        self.read_to = end

    @property
    def missing(self) -> list[int]:
        return [seq for seq, n in enumerate(self.copies) if not n]

    @property
    def extra_copies(self) -> int:
        return sum(n - 1 for n in self.copies if n > 1)


def _options(url: str, wal: Path, client_id: str, qos: int) -> Any:
    from connector.source.options import SourceOptions

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
    from connector.source.receiver import Receiver
    from devtools.fault_proxy import FaultProxy as ChaosProxy
    from devtools.mosquitto import MosquittoBroker

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
        publish_rate = publish_backlog(
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
    if tally.extra_copies != record["duplicates"]:
        raise BenchError(
            f"{name}: {tally.extra_copies} extra copies but {record['duplicates']} extra rows"
        )
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reconnect", description=__doc__.splitlines()[0]
    )
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
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    settings = [
        Setting(qos, inflight)
        for qos in dict.fromkeys(args.qos)
        for inflight in dict.fromkeys(args.inflight)
    ]
    info = machine_info()
    info["load_average_at_start"] = list(os.getloadavg())
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in settings}
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconnect-"))
    try:
        for rep in range(args.repeat):
            order = settings[rep % len(settings) :] + settings[: rep % len(settings)]
            for setting in order:
                record = one_run(
                    setting, args.messages, args.cut_at, args.size, args.timeout, workdir,
                    f"r{rep}-{setting.name}",
                )  # fmt: skip
                record["repetition"] = rep
                record["sequence"] = sum(len(r) for r in runs.values())  # the order measured
                runs[setting.name].append(record)
                print(
                    f"rep {rep} {setting.name}: cut with {record['stored_at_cut']:,} stored "
                    f"({record['stored_on_first_connection']:,} on connection 1), "
                    f"{record['stored_total']:,} stored in total, {record['duplicates']:,} "
                    f"duplicates ({record['possible_duplicates']:,} counted, "
                    f"{record['duplicates_dropped']:,} resends withheld), nothing lost",
                    flush=True,
                )
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        # RuntimeError covers the broker helpers' errors and a failed receiver (check()).
        sys.stderr.write(f"bench.reconnect: {exc}\n")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summaries = {name: summarize(r) for name, r in runs.items()}
    print(f"bench.reconnect: {describe_machine(info)}")
    print(
        f"backlog of {args.messages:,} messages ({args.size}-byte payloads), link cut once "
        f"{args.cut_at:,} were stored; {args.repeat} runs per setting; nothing lost"
    )
    print()
    rows = []
    for name, s in summaries.items():
        d, cut, first = s["duplicates"], s["stored_at_cut"], s["stored_on_first_connection"]
        rows.append(
            [
                name,
                f"{d['median']:,.0f}", f"{d['min']:,.0f}", f"{d['max']:,.0f}",
                f"{cut['median']:,.0f}", f"{cut['min']:,.0f}", f"{cut['max']:,.0f}",
                f"{first['median']:,.0f}",
                f"{s['possible_duplicates']['median']:,.0f}",
                f"{s['duplicates_dropped']['median']:,.0f}",
            ]
        )  # fmt: skip
    print(
        format_table(
            ["setting", "duplicates median", "min", "max", "stored at cut median", "min", "max",
             "on connection 1 median", "counted median", "withheld median"],
            rows,
        )
    )  # fmt: skip
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
    path = write_results("reconnect", results, args.output)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
