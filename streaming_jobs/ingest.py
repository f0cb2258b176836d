"""Land MQTT messages in a Delta table, exactly once.

    spark-submit streaming_jobs/ingest.py --broker tcp://broker:1883 --topic 'plant/#' --qos 2 \\
        --table ./data/tables/telemetry --checkpoint ./data/checkpoints/telemetry

The write-ahead log of the source goes inside the checkpoint directory (``<checkpoint>/mqtt-wal``)
so that one directory holds everything a restart needs. Works with plain ``python`` too.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connector.source.options import InvalidOptionError, SourceOptions

log = logging.getLogger("streaming_jobs.ingest")

TRIGGER_RE = re.compile(r"^(available-now|processing-time=(?P<interval>.+))$")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-submit streaming_jobs/ingest.py",
        description="Stream MQTT messages into a Delta table with exactly-once delivery.",
        epilog=(
            "example: spark-submit streaming_jobs/ingest.py --broker tcp://localhost:1883 "
            "--topic 'plant/+/telemetry' --qos 1 --table ./data/tables/telemetry "
            "--checkpoint ./data/checkpoints/telemetry --trigger processing-time='5 seconds'"
        ),
    )
    parser.add_argument(
        "--broker", required=True, help="tcp://HOST:PORT, ssl://HOST:PORT, mqtts://"
    )
    parser.add_argument(
        "--topic", action="append", required=True, help="topic filter; repeat for several"
    )
    parser.add_argument("--qos", default="1", choices=["0", "1", "2"], help="default 1")
    parser.add_argument("--table", required=True, help="Delta table path")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (holds the WAL)")
    parser.add_argument("--client-id", help="MQTT client id (default: stable, derived)")
    parser.add_argument(
        "--trigger",
        default="processing-time=1 second",
        help="available-now | processing-time=<interval> (default: processing-time=1 second)",
    )
    parser.add_argument("--max-messages-per-trigger", type=int, help="admission control")
    parser.add_argument("--mqtt-version", default="3.1.1", choices=["3.1", "3.1.1"])
    parser.add_argument("--clean-session", action="store_true", help="no persistent session")
    parser.add_argument("--username", default=os.environ.get("MQTT_USERNAME"))
    parser.add_argument(
        "--password-env",
        default="MQTT_PASSWORD",
        help="environment variable holding the password (default MQTT_PASSWORD)",
    )
    parser.add_argument("--cafile", help="CA bundle for ssl:// brokers")
    parser.add_argument("--certfile", help="client certificate (mutual TLS)")
    parser.add_argument("--keyfile", help="client key (mutual TLS)")
    parser.add_argument("--master", help="Spark master when not set by spark-submit")
    parser.add_argument(
        "--partition-data",
        choices=["inline", "wal"],
        help="how tasks get records: inline in the partitions (any cluster) or read from the "
        "WAL (executors share the driver's disk; default in local mode)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``mqtt`` source options for ``args`` (validated before Spark starts)."""
    options = {
        "brokerUrl": args.broker,
        "topics": ",".join(args.topic),
        "qos": args.qos,
        "walPath": str(Path(args.checkpoint).resolve() / "mqtt-wal"),
        "mqttVersion": args.mqtt_version,
        "cleanSession": str(bool(args.clean_session)).lower(),
    }
    if args.client_id:
        options["clientId"] = args.client_id
    if args.max_messages_per_trigger:
        options["maxMessagesPerTrigger"] = str(args.max_messages_per_trigger)
    if args.username:
        options["username"] = args.username
        password = os.environ.get(args.password_env)
        if password is not None:
            options["password"] = password
    for flag, key in (
        ("cafile", "tls.caFile"),
        ("certfile", "tls.certFile"),
        ("keyfile", "tls.keyFile"),
    ):
        if getattr(args, flag):
            options[key] = getattr(args, flag)
    if args.partition_data:
        options["partitionData"] = args.partition_data
    return options


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    match = TRIGGER_RE.match(args.trigger)
    if not match:
        sys.stderr.write(
            f"error: --trigger {args.trigger!r}: use available-now or processing-time=<interval>\n"
        )
        return 2
    options = source_options(args)
    try:
        SourceOptions.parse(options)
    except InvalidOptionError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2

    from streaming_jobs.spark_session import job_spark, resubmit_with_delta, submit_lacks_delta

    if submit_lacks_delta():
        resubmit_with_delta(os.path.abspath(__file__), list(sys.argv[1:] if argv is None else argv))
    spark = job_spark("mqtt-ingest", args.master)
    if args.partition_data is None and spark.sparkContext.master.startswith("local"):
        options["partitionData"] = "wal"
    reader = spark.readStream.format("mqtt")
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = reader.load().writeStream.format("delta").option("checkpointLocation", args.checkpoint)
    if match.group("interval"):
        writer = writer.trigger(processingTime=match.group("interval"))
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start(args.table)
    log.info("ingesting %s into %s (query %s)", ", ".join(args.topic), args.table, query.id)

    stop_requested = threading.Event()

    def _request_stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping the query", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    # The handler only sets a flag: stopping inside it would re-enter the Py4J call that
    # awaitTermination is blocked in.
    while not query.awaitTermination(1):
        if stop_requested.is_set():
            query.stop()
            break
    error = query.exception()
    if error is not None:
        sys.stderr.write(f"error: the query failed: {error}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
