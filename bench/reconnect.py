"""Duplicates from one dropped connection (``python -m bench.reconnect``): per QoS and
Mosquitto ``max_inflight_messages``, the receiver drains a backlog through a proxy that cuts the
link once ``--cut-at`` messages are stored, reconnects and drains the rest; a loss, an
unfinished drain or a duplicate at QoS 2 fails it."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import BenchError, Stats, arguments, finish, in_turns, machine, new_receiver
from .drainer import publish_numbered
from .payloads import Tally
from .render import Charts, Lines, inflight_label, md_table, median_range, num, stats_cells

TOPIC = "bench/reconnect/t"
TOPIC_FILTER = "bench/reconnect/#"
IDLE_SECONDS = 0.5
GIVE_UP_QUIET_SECONDS = 10.0
"""Reconnected and nothing arrived for this long with numbers missing: they are lost."""
MAX_MESSAGES = 65_535
"""One packet id per message: Mosquitto 2.0.11 numbers a queued message when it queues it."""
RANGES = (
    "stored_at_cut",
    "stored_on_first_connection",
    "possible_duplicates",
    "duplicates_dropped",
)
"""The figures shown as median (min-max) per setting; the duplicates too, in columns."""
PER_RUN = ("stored_at_cut", "stored_on_first_connection", "stored_total", "duplicates",
           "possible_duplicates", "duplicates_dropped")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Setting:
    qos: int
    inflight: int

    @property
    def name(self) -> str:
        return f"qos{self.qos}-inflight{self.inflight or '-unbounded'}"


class AckWatch:
    """Wakes waiters on each acknowledgement write; notes what the first connection stored."""

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
        """Wait for ``predicate()``, checked on each acknowledgement; False at ``deadline``."""
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

    __slots__ = ("read_to", "reader")

    def __init__(self, wal_path: Path, count: int) -> None:
        from connector.wal import WalReader

        super().__init__(count)
        self.reader = WalReader(str(wal_path))
        self.read_to = 0

    def update(self, end: int) -> None:
        if end > self.read_to:
            for payload in self.reader.read(self.read_to, end).payloads:
                self.note(bytes(payload[:SEQUENCE_DIGITS]))
            self.read_to = end


def one_run(setting: Setting, args: Any, workdir: Path) -> dict[str, Any]:
    """One backlog, one cut, one reconnect; the run's figures. BenchError on a loss."""
    from devtools.fault_proxy import FaultProxy
    from devtools.mosquitto import MosquittoBroker

    count, cut_at, timeout, name = args.messages, args.cut_at, args.timeout, setting.name
    wal, client_id = workdir / "wal", f"bench-reconnect-{workdir.name}"

    def receiver_at(url: str) -> Any:
        return new_receiver(url, TOPIC_FILTER, client_id, wal, qos=setting.qos, keepAlive="30")

    broker = MosquittoBroker(
        workdir / "broker", max_inflight_messages=setting.inflight,
        max_queued_messages=max(1_000_000, 2 * count),
    )  # fmt: skip
    with broker:
        setup = receiver_at(broker.url)
        setup.start()  # the persistent session and its subscription
        setup.stop()
        publish_numbered(
            broker.url, count, args.size, timeout, setting.qos, setting.inflight, TOPIC
        )
        with FaultProxy(("127.0.0.1", broker.port)) as proxy:
            receiver = receiver_at(proxy.url)
            watch = AckWatch(receiver)
            tally = NumberTally(wal, count)
            receiver.start()
            try:
                if not watch.wait(
                    lambda: receiver.wal.next_offset >= cut_at or receiver.error is not None,
                    time.monotonic() + timeout,
                ):
                    raise BenchError(f"{name}: {receiver.wal.next_offset} of {cut_at} stored")
                receiver.check()
                cut = proxy.cut()
                stored_at_cut = receiver.wal.next_offset
                if cut != 1:
                    raise BenchError(f"{name}: the proxy cut {cut} links, expected 1")

                def finished() -> bool:
                    pending = setting.qos == 2 and receiver.wal.qos2_pending
                    return tally.distinct == count and not pending

                def settled() -> bool:
                    """Finished, failed, or reconnected and quiet for ``GIVE_UP_QUIET_SECONDS``."""
                    if receiver.error is not None:
                        return True
                    tally.update(receiver.wal.next_offset)
                    if receiver.stats.connections < 2:
                        return False
                    quiet_for = time.monotonic() - receiver.last_activity
                    return finished() or quiet_for >= GIVE_UP_QUIET_SECONDS

                deadline = time.monotonic() + timeout
                settled_in_time = watch.wait(settled, deadline)
                receiver.check()
                if finished():
                    receiver.wait_idle(IDLE_SECONDS, timeout=max(0.0, deadline - time.monotonic()))
                    receiver.check()
                quiet_for = time.monotonic() - receiver.last_activity
                stored_total = receiver.wal.next_offset
                tally.update(stored_total)
                record: dict[str, Any] = {
                    "setting": name,
                    "qos": setting.qos,
                    "max_inflight_messages": setting.inflight,
                    "stored_at_cut": stored_at_cut,
                    "stored_on_first_connection": watch.first_connection_stored,
                    "stored_total": stored_total,
                    "duplicates": stored_total - count,
                    "possible_duplicates": receiver.stats.possible_duplicates,
                    "duplicates_dropped": receiver.stats.duplicates_dropped,
                    "missing": count - tally.distinct,
                    "connections": receiver.stats.connections,
                    "qos2_pending_at_end": len(receiver.wal.qos2_pending),
                }
            finally:
                receiver.stop()
    if not settled_in_time:
        failure = f"not finished {timeout:g} s after the cut"
    elif record["missing"]:
        failure = (
            f"LOST {record['missing']} of {count} messages (first missing: {tally.missing[:10]}; "
            f"nothing arrived for {quiet_for:.1f} s after the reconnect)"
        )
    elif record["qos2_pending_at_end"] or quiet_for < IDLE_SECONDS:
        failure = "the receiver did not finish"
    elif tally.out_of_range:
        failure = f"{tally.out_of_range} stored payloads are not the backlog's"
    elif setting.qos == 2 and record["duplicates"]:
        failure = "duplicates at QoS 2 (the pending-id rule withholds every resend)"
    else:
        return record
    raise BenchError(f"{name}: {failure}; run: {json.dumps(record)}")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median/max of each figure over a setting's runs, plus totals of the checks."""
    summary: dict[str, Any] = {
        key: Stats.of(float(r[key]) for r in runs).as_dict(3) for key in (*RANGES, "duplicates")
    }
    summary["counted_exactly"] = sum(1 for r in runs if r["possible_duplicates"] == r["duplicates"])
    summary["runs"] = len(runs)
    summary["lost"] = sum(r["missing"] for r in runs)
    return summary


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
    rows = [
        [
            str(item.get("qos", name)),
            inflight_label(item.get("max_inflight_messages")),
            num(s.get("runs")),
            *stats_cells(s["duplicates"]),
            *(median_range(s.get(key)) for key in RANGES),
            num(s.get("lost")),
        ]
        for name, item in settings.items()
        for s in [item["summary"]]
    ]
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
                    [str(r.get("repetition")), str(r.get("qos")),
                     inflight_label(r.get("max_inflight_messages")),
                     *(num(r.get(k)) for k in PER_RUN)]
                    for r in runs
                ],
            ),
        ]  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = arguments("reconnect", __doc__, messages=20_000, repeat=5, size=100, timeout=180.0)
    parser.add_argument("--cut-at", type=int, default=5_000, help="cut once this many are stored")
    parser.add_argument("--qos", type=int, nargs="+", choices=(1, 2), default=[1, 2])
    parser.add_argument(
        "--inflight", type=int, nargs="+", default=[20, 0],
        help="Mosquitto max_inflight_messages values (0: unbounded; default 20 0)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not 0 < args.cut_at < args.messages or args.messages > MAX_MESSAGES:
        parser.error(f"--cut-at must be between 0 and --messages, at most {MAX_MESSAGES:,}")
    if any(k < 0 for k in args.inflight):
        parser.error("--inflight values must be >= 0")
    settings = [
        Setting(q, k) for q in dict.fromkeys(args.qos) for k in dict.fromkeys(args.inflight)
    ]

    def measure() -> dict[str, Any]:
        info = machine()
        runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in settings}
        workdir = Path(tempfile.mkdtemp(prefix="bench-reconnect-"))
        try:
            for sequence, (rep, setting) in enumerate(in_turns(settings, args.repeat)):
                record = one_run(setting, args, workdir / f"r{rep}-{setting.name}")
                shutil.rmtree(workdir / f"r{rep}-{setting.name}", ignore_errors=True)
                record.update(repetition=rep, sequence=sequence)
                runs[setting.name].append(record)
                print(f"rep {rep} {setting.name}: {record['duplicates']:,} duplicates", flush=True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        params = {
            "messages": args.messages, "cut_at": args.cut_at, "payload_bytes": args.size,
            "repeat": args.repeat,
        }  # fmt: skip
        return {
            "command": " ".join(["python -m bench.reconnect", *argv]),
            "machine": info,
            "parameters": params,
            "settings": {
                s.name: {"qos": s.qos, "max_inflight_messages": s.inflight,
                         "summary": summarize(runs[s.name]), "runs": runs[s.name]}
                for s in settings
            },
        }  # fmt: skip

    return finish("reconnect", measure, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
