"""One subscription into four tables (``python -m bench.routes``): the same numbered JSON messages,
spread over four topics and queued at QoS 1, landed by the ingest job's routed writer through
four JSON routes into four tables, against one JSON table written by the job's single-table
writer, in turns, in one Spark session."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from . import common, drainer, ingest
from .render import (
    Charts,
    Lines,
    clock_notes,
    cpu_components_table,
    cpu_share_note,
    md_table,
    num,
    ratios_table,
    stats_cells,
    times,
)

ROUTES = 4
TOPIC_FILTER = "bench/routes/#"
SCHEMA = "seq BIGINT NOT NULL, sensor STRING, value DOUBLE, unit STRING"
"""The routes' ``schema``: the fields of :func:`payload`."""
PAYLOAD_BYTES = 100
ROUTED, ONE = "four-routes", "one-table"
PEERS = (ROUTED, ONE)
QOS = 1
BATCH = 20_000
"""Messages per batch at most: a run is ten batches of a stream, not one of a backlog."""


def topic(seq: int) -> str:
    """Message ``seq``'s topic: the routes' in turns."""
    return f"bench/routes/r{seq % ROUTES}/dev"


def payload(seq: int) -> bytes:
    """Message ``seq``'s JSON object, padded to :data:`PAYLOAD_BYTES` with spaces."""
    text = f'{{"seq":{seq},"sensor":"line-3/sensor-17","value":{(seq % 1000) / 8},"unit":"degC"}}'
    return text.encode().ljust(PAYLOAD_BYTES)


def writer(peer: str, workdir: Path) -> tuple[Any, list[Path]]:
    """``peer``'s foreachBatch writer and its tables: one JSON table (BatchWriter), or four
    routes with the same plan (RoutedBatchWriter)."""
    from pyspark.sql.types import StructType

    from streaming_jobs.batch_writer import BatchWriter
    from streaming_jobs.payloads import MQTT_COLUMNS, make_plan
    from streaming_jobs.progress import RunStats
    from streaming_jobs.routed_writer import RoutedBatchWriter, TableRoute

    plan = make_plan("json", cast(StructType, StructType.fromDDL(SCHEMA)))
    if peer == ONE:
        table = workdir / "table"
        return BatchWriter(plan, str(table), None, RunStats()), [table]
    tables = [workdir / f"table-{k}" for k in range(ROUTES)]
    targets = [TableRoute((k,), plan, str(t), None) for k, t in enumerate(tables)]
    filters = [f"bench/routes/r{k}/+" for k in range(ROUTES)]
    return RoutedBatchWriter(filters, targets, None, MQTT_COLUMNS, RunStats()), tables


def run_peer(spark: Any, peer: str, count: int, setup: ingest.Setup, workdir: Path) -> Any:
    """``peer``'s query over a fresh backlog of ``count`` messages, its tables checked."""
    from pyspark.sql import functions as F

    ingest.collect_garbage(spark)
    client_id = f"bench-routes-{peer}"
    queued = drainer.backlog(
        count, [(client_id, TOPIC_FILTER)], qos=QOS,
        publish=lambda url: common.publish_windowed(
            url, count, lambda seq: (topic(seq), payload(seq)), setup.timeout, QOS
        ),
    )  # fmt: skip
    checkpoint = workdir / "checkpoint"
    foreach, tables = writer(peer, workdir)
    with queued.broker as broker:
        argv = ["--broker", broker.url, "--table", str(tables[0]), "--checkpoint", str(checkpoint),
                "--topic", TOPIC_FILTER, "--qos", str(QOS), "--client-id", client_id,
                "--partition-data", "wal",
                *(f"--source-option={o}" for o in setup.source_options)]  # fmt: skip
        frame = ingest.job_source(spark, argv)
        foreach.create_tables(spark, frame.schema)
        stream = frame.writeStream.option("checkpointLocation", str(checkpoint))
        stream = stream.trigger(processingTime=setup.trigger).foreachBatch(foreach)
        run = ingest.run_query(stream, count, setup.timeout)
        common.check_broker(broker)
    landing = ingest.Landing(peer, count, run, queued.publish_rate)
    seq = F.col("seq")
    per_table = count // len(tables)
    found: Mapping[str, Any] = {}
    for k, table in enumerate(tables):
        want = per_table + (1 if k < count % len(tables) else 0)
        figures = {
            "rows": F.count("*"),
            "distinct": F.countDistinct(seq),
            "bad": F.count_if(seq.isNull() | (seq % len(tables) != k % len(tables))),
        }
        if len(tables) == 1:
            want, figures["bad"] = count, F.count_if(seq.isNull())
        wanted = {"rows": want, "distinct": want, "bad": 0}
        found = drainer.check_table(spark, table, figures, wanted)
    return ingest.received(landing, found)


def build_results(
    runs: dict[str, list[Any]], orders: list[list[str]], info: dict[str, Any],
    parameters: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The JSON document of a run (``bench/results/routes.json``)."""
    rates = {peer: [r.rate for r in found] for peer, found in runs.items()}
    paired = common.paired_ratio(rates[ROUTED], rates[ONE])
    return {
        "machine": info,
        "parameters": parameters,
        "clocks": {ingest.FIRST_BATCH: ingest.CLOCKS[ingest.FIRST_BATCH]},
        "peers": {
            peer: {
                "messages_per_second": common.Stats.of(rates[peer]).as_dict(1),
                "runs": [r.as_dict() for r in found],
            }
            for peer, found in runs.items()
        },
        "ratios": {f"{ROUTED}/{ONE}": paired.as_dict(3)},
        "repetitions": [
            {
                "repetition": i,
                "order": order,
                **{p: round(rates[p][i]) for p in PEERS},
                "ratio": round(paired.runs[i], 3),
            }
            for i, order in enumerate(orders)
        ],
        "other_processes_cpu_share": round(ingest.others_share(runs), 3),
        "cpu_seconds_per_100k_messages": ingest.cpu_per_100k(runs, lambda r: r.rows),
    }


def parse_args(argv: Sequence[str] | None = None) -> Any:
    parser = common.arguments("routes", __doc__, messages=200_000, repeat=3, timeout=600.0)
    ingest.query_arguments(parser)
    parser.add_argument(
        "--batch", type=int, default=BATCH, help=f"messages per batch at most (default {BATCH})"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options = (f"maxMessagesPerTrigger={args.batch}", *args.source_option)
    setup = ingest.Setup(args.trigger, args.timeout, options)

    def measure() -> dict[str, Any]:
        info = common.machine("pyspark", "delta-spark", "pyarrow")
        work = Path(tempfile.mkdtemp(prefix="bench-routes-"))
        spark = ingest.spark_session("bench-routes")
        runs: dict[str, list[Any]] = {peer: [] for peer in PEERS}
        orders = [common.turn(PEERS, rep) for rep in range(args.repeat)]
        rounds = [(None, list(PEERS))] * args.warmup_rounds + [(runs, o) for o in orders]
        try:
            for number, (into, order) in enumerate(rounds):
                for peer in order:
                    # A new path each run: Delta's log cache still knows the last run's tables.
                    run = work / f"run-{number}-{peer}"
                    landing = run_peer(spark, peer, args.messages, setup, run)
                    if into is not None:
                        into[peer].append(landing)
                    shutil.rmtree(run, ignore_errors=True)
        finally:
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)
        parameters = {
            "messages": args.messages, "routes": ROUTES, "schema": SCHEMA, "qos": QOS,
            "repeat": args.repeat, "warmup_rounds": args.warmup_rounds, "master": "local[2]",
            "trigger": f"processingTime={args.trigger}",
            "source_options": list(options), "payload_bytes": PAYLOAD_BYTES,
        }  # fmt: skip
        return build_results(runs, orders, info, parameters)

    return common.finish("routes", measure, args.output, section)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Four routes against one table, same messages, same run."""
    params, peers = data.get("parameters", {}), data["peers"]
    out = [
        f"{num(params.get('messages'))} numbered {params.get('payload_bytes')}-byte JSON "
        f"messages over "
        f"{params.get('routes')} topics, queued at QoS {params.get('qos')}, landed in Delta on "
        f"{params.get('master')}, trigger {params.get('trigger')}, source options "
        + ", ".join(f"`{o}`" for o in params.get("source_options", []))
        + ", parsed with the schema "
        f"`{params.get('schema')}`; peers in turns after {params.get('warmup_rounds')} "
        f"unmeasured round(s), median of {params.get('repeat')}. `{ROUTED}`: `[[routes]]` with "
        f"one JSON route per topic into a table each (the routed writer); `{ONE}`: "
        "`--payload-format json` into one table (the single-table writer).",
        "",
        *clock_notes(data),
        *md_table(
            ["peer", "msg/s median", "min", "max"],
            [[peer, *stats_cells(item["messages_per_second"])] for peer, item in peers.items()],
        ),
        "",
        *md_table(
            ["repetition", "order", f"{ROUTED} msg/s", f"{ONE} msg/s", f"{ROUTED}/{ONE}"],
            [
                [
                    str(r["repetition"]),
                    " then ".join(r["order"]),
                    num(r[ROUTED]),
                    num(r[ONE]),
                    times(r["ratio"]),
                ]
                for r in data.get("repetitions", [])
            ],
        ),
        "",
        *ratios_table(data.get("ratios"), "ratio (msg/s)"),
        "",
        *cpu_components_table(data),
    ]
    return out + cpu_share_note(data, "during the measured batches")


if __name__ == "__main__":
    sys.exit(main())
