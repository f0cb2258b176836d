"""The WAL on an S3-compatible server on loopback against a local WAL: ``bench.ingest``'s S3
peers (``--s3-modes``: the ingest query with ``walPath`` on s3proxy, a fresh prefix per run,
in turns with ``ours-wal`` and paired with it run by run; goal: at least half its rate), the
receiver alone with every WAL append timed (``--append-profile``: backlogs and a live stream,
a local WAL and one on the server in turns), and the report's section over several such runs.
"""

from __future__ import annotations

import functools
import operator
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import REPO_ROOT, BenchError, Stats, in_turns, new_receiver, pub_command
from .cpu_sampler import NOT_THE_PIPELINE
from .drainer import TOPIC, TOPIC_FILTER, backlog
from .ingest import FIRST_BATCH, RECEIVER, IngestRun, OursPeer, json_backlog
from .payloads import JSON_BYTES
from .render import (
    Charts,
    Lines,
    cpu_share_note,
    inflight_label,
    md_table,
    num,
    per_repetition,
    stats_cells,
    times,
    warmup_notes,
)

SHARED_WAL_GOAL = 0.5
"""The query with its WAL on the server against it with a local WAL: QoS, window, repetition."""


class S3Store:
    """An S3 server on loopback (s3proxy) with one bucket; a fresh prefix per WAL."""

    def __init__(self, server: Any, bucket: str) -> None:
        self.server, self.bucket, self._made = server, bucket, 0

    @classmethod
    def start(cls, workdir: Path, bucket: str = "bench-wal") -> S3Store:
        """The test credentials (before any S3 client or JVM), then the server and the bucket."""
        from devtools.s3_server import S3Server, use_test_credentials

        use_test_credentials()
        server = S3Server(workdir).start()
        try:
            server.make_bucket(bucket)
        except BaseException:
            server.close()
            raise
        return cls(server, bucket)

    @property
    def version(self) -> str:
        """The server's jar name, e.g. ``s3proxy-4.1.0``."""
        from devtools.s3_server import s3proxy_jar

        return s3proxy_jar().stem

    def fresh(self, label: str) -> str:
        """A ``walPath`` under a prefix no WAL used before."""
        self._made += 1
        return str(self.server.uri(self.bucket, f"{label}-{self._made}"))

    def close(self) -> None:
        self.server.close()


@dataclass(slots=True)
class Appends:
    """The receiver alone storing ``messages`` into one WAL: every append call it made."""

    peer: str
    messages: int
    seconds: float  # connect -> the last message durable (and released); live: first append on
    calls: list[tuple[int, int, float]]  # (records, QoS 2 releases, seconds) per append
    live: bool = False

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def as_dict(self) -> dict[str, Any]:
        sizes = sorted(c[0] for c in self.calls if c[0])
        spent = sorted(c[2] for c in self.calls)
        return {
            "live": self.live, "messages": self.messages, "rate": round(self.rate),
            "appends": len(self.calls),
            "appends_of_releases_only": sum(1 for c in self.calls if not c[0] and c[1]),
            "messages_per_append": _spread(sizes, 1),
            "append_ms": _spread([t * 1000 for t in spent], 1000),
            "share_of_time_in_appends": round(sum(spent) / self.seconds, 3),
        }  # fmt: skip


def _spread(ordered: Sequence[float], scale: int) -> dict[str, float]:
    """Median, 90th percentile and max of sorted values (rounded to 1/scale)."""
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale) / scale

    return {"median": at(0.5), "p90": at(0.9), "max": round(ordered[-1] * scale) / scale}


def receiver_appends(
    peer: OursPeer, count: int, wal: str, timeout: float, *, live: bool = False
) -> Appends:
    """The receiver alone storing ``count`` messages (backlog or ``live``), appends timed."""
    client_id = "bench-ingest-appends"
    sessions = [(client_id, TOPIC_FILTER)]
    if live:  # the session only: the publisher sends while the receiver is connected
        queued = backlog(count, sessions, lambda url: 0.0, qos=peer.qos, inflight=peer.inflight)
    else:
        queued = json_backlog(count, sessions, timeout, peer.qos, peer.inflight)
    calls: list[tuple[int, int, float]] = []
    first: list[float] = []
    publisher: subprocess.Popen[bytes] | None = None
    with queued.broker as broker:
        receiver = new_receiver(broker.url, TOPIC_FILTER, client_id, wal, qos=peer.qos)
        log = receiver.wal
        append = log.append

        def timed(records: Sequence[Any], *, released_qos2: Any = ()) -> int:
            released = list(released_qos2)
            began = time.perf_counter()
            end = append(records, released_qos2=released)
            if records and not first:
                first.append(began)
            calls.append((len(records), len(released), time.perf_counter() - began))
            return end

        setattr(log, "append", timed)  # noqa: B010 (this instance only)
        start = time.perf_counter()
        receiver.start()
        try:
            if live:
                publisher = subprocess.Popen(
                    pub_command(broker.url, TOPIC, peer.qos, count, JSON_BYTES),
                    cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                )  # fmt: skip
            while log.next_offset < count or log.qos2_pending:
                receiver.check()
                if time.perf_counter() > start + timeout:
                    raise BenchError(f"{peer.name}: {log.next_offset} of {count} stored")
                time.sleep(0.002)
            seconds = time.perf_counter() - (first[0] if live else start)
        finally:
            receiver.stop()
            if publisher is not None:
                try:
                    _, err = publisher.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    publisher.kill()
                    _, err = publisher.communicate()
    if publisher is not None and publisher.returncode != 0:
        raise BenchError(f"the publisher failed: {err.decode()[-2000:]}")
    if log.next_offset != count:
        raise BenchError(f"{peer.name}: the receiver stored {log.next_offset} of {count}")
    return Appends(peer.name, count, seconds, calls, live)


def append_profile(run: IngestRun) -> dict[str, Any]:
    """The receiver alone into a local WAL and an S3 one, backlog and live, in turns."""
    lives = (False, True) if run.args.live_messages > 0 else (False,)
    turns = [
        (OursPeer("wal", qos, store, window), live)
        for live in lives for window in run.windows for qos in run.levels
        for store in ("local", "s3")
    ]  # fmt: skip
    found: dict[str, list[Appends]] = {}
    for rep, (peer, live) in in_turns(turns, run.args.repeat):
        kind = "live" if live else "backlog"
        local_dir = run.work / f"appends-{peer.name}-{kind}-{rep}"
        where = str(local_dir) if peer.store == "local" else run.s3.fresh(f"{peer.name}-{kind}")
        count = min(run.args.live_messages, run.sizes[peer.qos]) if live else run.sizes[peer.qos]
        label = f"{peer.name} (live)" if live else peer.name
        found.setdefault(label, []).append(
            receiver_appends(peer, count, where, run.args.timeout, live=live)
        )
        shutil.rmtree(local_dir, ignore_errors=True)
    return {
        peer: {
            "rate": Stats.of(a.rate for a in runs).as_dict(1),
            "runs": [a.as_dict() for a in runs],
        }
        for peer, runs in found.items()
    }


# ------------------------------------------------------------------------------ the report

S3_CPU_COMPONENTS = (
    ("other descendants", "s3proxy (other descendants)"),
    ("python: source runner (receiver, offsets, partitions)", "source runner"),
    ("python: task workers (read)", "task workers (read)"),
)
INGEST_S3_FILES = ("ingest_s3", "ingest_s3_inline", "ingest_s3_qos2", "ingest_s3_long")
Data = Mapping[str, Any]


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def _s3_pairs(data: Data) -> dict[str, tuple[str, Data]]:
    """Each S3 peer of an ingest run: its local-WAL peer and their paired ratio."""
    return {
        s3: (local, stats)
        for name, stats in data.get("ratios", {}).items()
        for s3, _, local in [name.partition("/")]
        if local and isinstance(stats, Mapping)
    }


def _peer_rate(data: Data, peer: str, clock: str = FIRST_BATCH) -> float:
    return float(data["peers"][peer]["rates"][clock]["median"])


def _pipeline_cpu(peer: Data) -> float | None:
    """CPU seconds per 100,000 messages of the pipeline, median over the runs."""
    values = [
        sum(v for c, v in run["cpu_seconds"].items() if c not in NOT_THE_PIPELINE)
        / run["rows"]
        * 100_000
        for run in peer.get("runs", [])
        if run.get("cpu_seconds") and run.get("rows")
    ]
    return _median(values) if values else None


def _batch_rows(run: Data) -> list[int]:
    return [int(b["rows"]) for b in run.get("batches", []) if b.get("rows")]


def section(data: Data, charts: Charts, detail: bool = True) -> Lines:
    """The S3 peers' rates, paired ratios and, with ``detail``, batches and CPU."""
    params = data.get("parameters", {})
    sizes = params.get("messages_per_qos") or {}
    backlogs = " and ".join(f"{num(n)} QoS {q}" for q, n in sizes.items())
    windows = " and ".join(inflight_label(w) for w in params.get("max_inflight_messages", []))
    modes = " and ".join(f"`{m}`" for m in params.get("s3_modes", []))
    out = [
        f"Backlogs of {backlogs} messages ({params.get('payload_bytes')}-byte JSON) drained into "
        f"Delta by the ingest job's query on {params.get('master')}, trigger "
        f"{params.get('trigger')}; Mosquitto's `max_inflight_messages` {windows}; the S3 peers "
        f"with `partitionData` {modes}; median of {params.get('repeat')}.",
        "",
    ]
    if shared := cpu_share_note(data, "in the measured windows (median over the runs)"):
        out += [*shared, ""]
    out += warmup_notes(params.get("warmup"), None)
    clocks = data.get("clocks", {})
    if FIRST_BATCH in clocks:
        line = f"Clocks: msg/s is {FIRST_BATCH}, {clocks[FIRST_BATCH]}"
        if RECEIVER in clocks:
            line += f"; receiver msg/s is {clocks[RECEIVER]}"
        out += [line + ".", ""]
    pairs, goals, rows = _s3_pairs(data), data.get("goal", {}), []
    for peer, item in data["peers"].items():
        rates, (local, stats) = item.get("rates", {}), pairs.get(peer, ("", None))
        cells = [peer, *stats_cells(rates.get(FIRST_BATCH, {})),
                 num(rates.get(RECEIVER, {}).get("median")), "", "", ""]  # fmt: skip
        if stats is not None:
            goal = goals.get(f"{peer}/{local}")
            met = isinstance(goal, Mapping) and "met" in goal
            verdict = "—" if not met else (
                f"{goal['measured']:.3f} ≥ {goal['target']:g}: met" if goal["met"]
                else f"{goal['measured']:.3f} < {goal['target']:g}: **not met**"
            )  # fmt: skip
            cells[-3:] = [per_repetition(stats), times(stats.get("median")), verdict]
        rows.append(cells)
    out += md_table(
        ["peer", "msg/s median", "min", "max", "receiver msg/s median",
         "ratio to the local WAL (same QoS, window), per repetition", "median", "goal"],
        rows,
    )  # fmt: skip
    return [*out, *_batches_lines(data), *_s3_cpu_lines(data)] if detail else out


section_brief = functools.partial(section, detail=False)


def _batches_lines(data: Data) -> Lines:
    """Rows per micro-batch per run, or the number of batches when runs took many."""
    per_peer = {
        peer: [_batch_rows(run) for run in item.get("runs", [])]
        for peer, item in data["peers"].items()
    }
    most = max((len(rows) for runs in per_peer.values() for rows in runs), default=0)
    if most > 3:
        counts = "; ".join(
            f"{peer} {', '.join(str(len(rows)) for rows in runs)}"
            for peer, runs in per_peer.items()
        )
        return ["", f"Micro-batches per run, in the order of the repetitions: {counts}."]
    whole = ", ".join(
        f"{peer} {sum(len(rows) == 1 for rows in runs)} of {len(runs)}"
        for peer, runs in per_peer.items()
    )
    lead = (
        "Without `maxMessagesPerTrigger` a micro-batch takes what the receiver has stored when "
        "it is planned, so a backlog not yet stored in full takes a second batch. "
        if not data.get("parameters", {}).get("source_options")
        else ""
    )
    table = [
        [peer, "; ".join(" + ".join(num(n) for n in rows) for rows in runs)]
        for peer, runs in per_peer.items()
    ]
    return [] if not most else [
        "",
        f"{lead}Runs whose backlog landed in one micro-batch: {whole}.",
        "",
        *md_table(["peer", "rows per micro-batch, in the order of the repetitions"], table),
    ]  # fmt: skip


def _s3_cpu_lines(data: Data) -> Lines:
    cpu = data.get("cpu_seconds_per_100k_messages")
    if not isinstance(cpu, Mapping):
        return []
    rows = [
        [peer, *(f"{cpu[peer].get(component, 0.0):.2f}" for component, _ in S3_CPU_COMPONENTS),
         num(_pipeline_cpu(item), 2)]
        for peer, item in data["peers"].items()
        if isinstance(cpu.get(peer), Mapping)
    ]  # fmt: skip
    return [
        "",
        "CPU seconds per 100,000 messages while the measured batches ran, median of the runs "
        "(sampled from /proc by `bench.cpu_sampler`; the S3 server is the benchmark's *other "
        "descendants*; the pipeline is every component but the sampler and other processes):",
        "",
        *md_table(["peer", *(label for _, label in S3_CPU_COMPONENTS), "total of the pipeline"],
                  rows),
    ]  # fmt: skip


def _spark_windows(data: Data) -> dict[str, Any]:
    """Each Spark peer's broker window (``max_inflight_messages`` of its runs)."""
    return {
        peer: item["runs"][0].get("max_inflight_messages")
        for peer, item in data["peers"].items()
        if item.get("runs")
    }


def section_appends(data: Data, charts: Charts) -> Lines:
    """``bench.ingest --append-profile``: the receiver alone, every WAL append timed."""
    appends = data.get("receiver_appends")
    if not isinstance(appends, Mapping):
        return ["*No append profile in this run (`--append-profile`).*"]
    params = data.get("parameters", {})
    live = [run for item in appends.values() for run in item["runs"] if run.get("live")]
    live_text = (
        f", and {num(live[0]['messages'])} messages sent by a publisher (`connector.mqtt pub`, "
        f"{params.get('publish_inflight')} in flight) while it is connected (*live*)"
        if live
        else ""
    )
    out = [
        "After the Spark runs, the source's receiver alone (no Spark, in the benchmark's process) "
        f"stores the same backlogs{live_text}, into a local WAL and into one on the S3 server, "
        "in turns; every append is timed. An append is one socket read (QoS 2: or a read of "
        "PUBRELs alone, *of releases only*). Medians of the per-run figures over "
        f"{params.get('repeat')} repetitions; msg/s is connect → last message durable (live: "
        "first append → last).",
        "",
    ]
    windows = _spark_windows(data)
    mosquitto = data.get("machine", {}).get("mosquitto")
    for window in sorted({w for w in windows.values() if isinstance(w, int) and w > 0}):
        held = {False: 0, True: 0}
        for peer, item in appends.items():
            for run in item["runs"] if windows.get(peer.removesuffix(" (live)")) == window else []:
                kind = bool(run.get("live"))
                held[kind] = max(held[kind], int(run["messages_per_append"]["max"]))
        if max(held.values()) > window:
            out += [
                f"Mosquitto {mosquitto} did not hold `max_inflight_messages` {window} here "
                "(docs/brokers.md, eclipse-mosquitto/mosquitto#2306): with that window one "
                f"socket read held up to {num(held[False])} messages of a backlog"
                + (f" and up to {num(held[True])} of a live stream" if live else "")
                + f". So window {window} and unbounded are two broker settings, not {window} "
                f"messages per append; what a broker that holds a window of {window} would cost "
                f"is the {window}-record row of [One append per layout](#one-append-per-layout).",
                "",
            ]
    columns: list[tuple[Callable[[float], str], tuple[str, ...]]] = [
        (num, ("appends",)), (num, ("appends_of_releases_only",)),
        (num, ("messages_per_append", "median")), (num, ("messages_per_append", "p90")),
        (lambda v: num(v, 2), ("append_ms", "median")), (lambda v: num(v, 2), ("append_ms", "p90")),
        (lambda v: f"{v:.0%}", ("share_of_time_in_appends",)),
    ]  # fmt: skip
    rows = [
        [peer, num(item["rate"]["median"]),
         *(show(_appends_median(data, peer, *path)) for show, path in columns)]
        for peer, item in appends.items()
    ]  # fmt: skip
    return out + md_table(
        ["receiver alone", "msg/s", "appends", "of releases only", "msgs/append p50", "p90",
         "ms/append p50", "p90", "time in appends"],
        rows,
    )  # fmt: skip


def _appends_median(data: Data, peer: str, *path: str) -> float:
    runs = data["receiver_appends"][peer]["runs"]
    return _median(float(functools.reduce(operator.getitem, path, run)) for run in runs)


def _pairs_by_qos(data: Data, qos: int) -> list[tuple[str, str, Any]]:
    """(S3 peer, local peer, window) of the ratio goals at ``qos``, in the file's order."""
    windows = _spark_windows(data)
    return [
        (s3, local, windows.get(s3))
        for s3, (local, _) in _s3_pairs(data).items()
        if data.get("goal", {}).get(f"{s3}/{local}", {}).get("qos") == qos
    ]


def _synchronous_append(results: Data) -> str | None:
    """The first limit: an append waits for its PUT."""
    found = []
    wal, data = results.get("wal_throughput"), results.get("ingest_s3")
    row_of = {(r["layout"], int(r["batch"])): r for r in wal["rows"]} if wal else {}
    if sizes := sorted(b for lay, b in row_of if lay == "objects-s3" and ("files", b) in row_of):
        ms = {key: f"{row['append_ms_median']:.2f}" for key, row in row_of.items()}
        small, large = sizes[0], sizes[-1]
        fsync = " with fsync" if wal and wal.get("parameters", {}).get("files_fsync") else ""
        found.append(
            f"One PUT to the server on loopback took {ms['objects-s3', small]} ms for "
            f"{num(small)} records and {ms['objects-s3', large]} ms for {num(large)}, against "
            f"{ms['files', small]} and {ms['files', large]} ms for a local append{fsync}."
        )
    pairs = _pairs_by_qos(data, 1) if data else []
    if pairs and data and isinstance(alone := data.get("receiver_appends"), Mapping):
        s3, local, _ = pairs[0]
        s3_size = _appends_median(data, s3, "messages_per_append", "median")
        local_size = _appends_median(data, local, "messages_per_append", "median")
        grow = ", the reads grow to fill the time" if s3_size > local_size else ""
        rates = ", ".join(
            f"{num(alone[s]['rate']['median'])} against {num(alone[loc]['rate']['median'])} "
            f"msg/s {'unbounded' if w == 0 else f'at window {w}'}"
            for s, loc, w in pairs
        )
        found.append(
            f"Draining a backlog{grow}: the S3 receiver stored {num(s3_size)} messages per "
            f"append (median) where the local one stored {num(local_size)}; the receiver alone "
            f"stored {rates}."
        )
    window = pairs[0][2] if pairs else None
    row = row_of.get(("objects-s3", window)) if isinstance(window, int) else None
    ratio = (
        wal["ratios"].get(f"objects-s3/files, {window:,} records per append")
        if row and wal
        else None
    )
    if row and isinstance(ratio, Mapping):
        found.append(
            f"A broker that holds a window of {window} would cap it at {window} messages "
            f"per PUT: at most {num(row['records_per_s']['median'])} records/s on loopback, "
            f"the rate of {window}-record appends ({times(ratio['median'])} a local WAL); "
            "with a remote store's longer PUTs, lower again."
        )
    lead = "**The append is synchronous: read → PUT → acknowledge → read.** "
    return lead + " ".join(found) if found else None


def _first_batch(results: Data) -> str | None:
    """The second limit: a short backlog not stored in full when the first batch is planned."""
    found = []
    data, long = results.get("ingest_s3"), results.get("ingest_s3_long")
    if data and (pairs := _pairs_by_qos(data, 1)):
        s3, local, _ = pairs[0]
        runs = data["peers"][s3]["runs"]
        split = [_batch_rows(run) for run in runs if len(_batch_rows(run)) > 1]
        text = (
            f"Inside the query the S3 receiver stored {num(runs[0]['rows'])} messages at "
            f"{num(_peer_rate(data, s3, RECEIVER))} msg/s against "
            f"{num(_peer_rate(data, local, RECEIVER))}"
        )
        if split:
            low, high = min(rows[0] for rows in split), max(rows[0] for rows in split)
            took = num(low) if low == high else f"{num(low)}-{num(high)}"
            text += (
                f", so in {len(split)} of {len(runs)} runs the first micro-batch took {took} "
                "of them instead of all and another batch followed (rows per micro-batch above)"
            )
        found.append(text + ".")
    if long:
        counts = [len(_batch_rows(run)) for item in long["peers"].values() for run in item["runs"]]
        found += [
            f"With {num(long['peers'][s3]['runs'][0]['rows'])} messages "
            f"({min(counts)}-{max(counts)} micro-batches per run either way) the ratio was "
            f"{times(stats['median'])}."
            for s3, (_, stats) in _s3_pairs(long).items()
        ]
    return "**Short backlogs: the first batch.** " + " ".join(found) if found else None


def _qos2_releases(results: Data) -> str | None:
    """The third limit: at QoS 2 a read of PUBRELs alone is an append, so a PUT."""
    data = results.get("ingest_s3")
    if not data or not (pairs := _pairs_by_qos(data, 2)):
        return None
    s3, local, _ = pairs[0]
    found = []
    if isinstance(data.get("receiver_appends"), Mapping):
        runs = data["receiver_appends"][s3]["runs"]
        found.append(
            f"{num(_appends_median(data, s3, 'appends_of_releases_only'))} of the "
            f"{num(_appends_median(data, s3, 'appends'))} appends of a "
            f"{num(runs[0]['messages'])}-message QoS 2 drain held releases only (median "
            f"{_appends_median(data, s3, 'append_ms', 'median'):.1f} ms per append);"
        )
    cpu_s3, cpu_local = _pipeline_cpu(data["peers"][s3]), _pipeline_cpu(data["peers"][local])
    components = data.get("cpu_seconds_per_100k_messages", {})
    if cpu_s3 and cpu_local and isinstance(components, Mapping):
        runner = S3_CPU_COMPONENTS[1][0]
        found.append(
            f"the pipeline's CPU per 100,000 messages went from {cpu_local:.2f} to "
            f"{cpu_s3:.2f} s (s3proxy {components[s3]['other descendants']:.2f} s, the source "
            f"runner {components[s3][runner] - components[local][runner]:+.2f} s)."
        )
        measured = float(data["ratios"][f"{s3}/{local}"]["median"])
        cpu_ratio = cpu_local / cpu_s3
        followed = abs(measured - cpu_ratio) <= 0.1
        found.append(
            f"On {data.get('machine', {}).get('cores')} cores the rate ratio "
            + ("followed" if followed else "did not follow")
            + f" the CPU ratio ({times(measured)} measured, {cpu_local:.2f}/{cpu_s3:.2f} = "
            f"{cpu_ratio:.2f})" + (": the pipeline is CPU-bound." if followed else ".")
        )
    return "**QoS 2: one PUT per read of PUBRELs.** " + " ".join(found) if found else None


def _server_cost(results: Data) -> str | None:
    """The fourth limit: the S3 server's own CPU on the same cores."""
    costs, cores = [], None
    for name in (n for n in INGEST_S3_FILES if isinstance(results.get(n), Mapping)):
        data = results[name]
        cores = data.get("machine", {}).get("cores", cores)
        cpu = data.get("cpu_seconds_per_100k_messages", {})
        costs += [
            (float(cpu[s3]["other descendants"]), f"{s3}, `{name}.json`")
            for s3 in _s3_pairs(data)
            if isinstance(cpu.get(s3), Mapping)
        ]
    if not costs:
        return None
    (low, where_low), (high, where_high) = min(costs), max(costs)
    return (
        f"**s3proxy's own cost.** The server runs on the same {cores} cores: {low:.2f} "
        f"({where_low}) to {high:.2f} ({where_high}) CPU seconds per 100,000 messages, taken "
        "from Spark. A remote store costs no CPU here but longer PUTs."
    )


def _tasks_reads(results: Data) -> str | None:
    """Whether shipping records inline (no reads from the store in the tasks) helped."""
    if not isinstance(data := results.get("ingest_s3_inline"), Mapping):
        return None
    compared = [
        (float(stats["median"]), float(other["median"]),
         data.get("goal", {}).get(f"{s3}/{local}", {}).get("qos"))
        for s3, (local, stats) in _s3_pairs(data).items()
        if "-inline" in s3
        and isinstance(other := data["ratios"].get(f"{s3.replace('-inline', '', 1)}/{local}"),
                       Mapping)
    ]  # fmt: skip
    if not compared:
        return None
    gains = [inline - wal for inline, wal, _ in compared]
    if max(gains) <= 0.05:
        lead, verdict = "**Not the tasks' reads.**", "was no faster"
    elif min(gains) > 0.05:
        lead, verdict = "**The tasks' reads.**", "was faster"
    else:
        lead, verdict = "**The tasks' reads, in part.**", "was faster at one QoS only"
    figures = ", ".join(f"{times(a)} against {times(b)} at QoS {qos}" for a, b, qos in compared)
    return (
        f"{lead} Shipping records inline instead of letting the tasks read the parts from the "
        f"store {verdict} ({figures}; `ingest_s3_inline.json`)."
    )


def _busy_machine(results: Data) -> str | None:
    """What the ratio says when other processes take most of the CPU."""
    busy, base = results.get("ingest_s3_busy"), results.get("ingest_s3")
    if not isinstance(busy, Mapping) or busy.get("other_processes_cpu_share") is None:
        return None
    share = float(busy["other_processes_cpu_share"])
    same = isinstance(base, Mapping) and busy.get("parameters") == base.get("parameters")
    load = busy.get("machine", {}).get("load_average_at_start") or []
    ratios = ", ".join(times(r.get("median")) for r in busy.get("ratios", {}).values())
    return (
        "**CPU share of other processes.** "
        + ("The same parameters as *Into Delta*" if same else "Another run")
        + " on a busier machine (`ingest_s3_busy.json`: load average at start "
        + ", ".join(f"{v:.2f}" for v in load)
        + f"; other processes took {share:.0%} of the CPU) gave {ratios}"
        + (
            ": both peers were starved alike, so the ratio there says little about the store."
            if share >= 0.3
            else "."
        )
    )


def intro(results: Data) -> Lines:
    data: Data = next(
        (results[n] for n in INGEST_S3_FILES if isinstance(results.get(n), Mapping)), {}
    )
    server = str(data.get("machine", {}).get("s3_server", "s3proxy")).replace("-", " ", 1)
    targets = [g["target"] for name, g in data.get("goal", {}).items() if "/" in name]
    goal = (
        f" Goal: a drain into Delta with the WAL on the server at ≥ {targets[0]:g}x the rate of "
        "the same query with a local WAL (`ours-wal`), same QoS and broker window, ratio per "
        "repetition."
        if targets
        else ""
    )
    return [
        "The source's WAL on an S3-compatible server on loopback (`walPath=s3://…?"
        f"endpoint_override=127.0.0.1:PORT&scheme=http&region=us-east-1`, {server} from "
        "`devtools/s3_server.py`, started by the benchmark on a free 127.0.0.1 port, a fresh "
        "prefix per run) against a local WAL, measured in the same process, the peers taking "
        f"turns within every repetition.{goal} `ours-s3` ships records with "
        "`partitionData=wal`, the source's default for a WAL on shared storage, so the tasks "
        "read the parts from the store; `ours-s3-inline` ships them from the driver.",
        "",
        "The machine is shared: each run states its load average at start and the share of the "
        "machine's CPU that other processes took while its measured batches ran.",
        "",
    ]


def what_limits(results: Data) -> Lines:
    """Figures of the ``ingest_s3*`` and ``wal_throughput`` results side by side, as bullets."""
    bullets = [
        found
        for make in (
            _synchronous_append, _first_batch, _qos2_releases, _server_cost, _tasks_reads,
            _busy_machine,
        )
        if (found := make(results))
    ]  # fmt: skip
    if not bullets:
        return ["*Not rendered: no results of the WAL on object storage.*"]
    return [f"* {b}" for b in bullets]
