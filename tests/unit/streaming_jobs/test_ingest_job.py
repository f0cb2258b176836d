"""The ingest job's pieces that need no Spark: settings precedence, error lines, progress."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from connector.receiver.shard_handles import ShardStatus
from connector.spark.reader.progress_report import progress_report
from streaming_jobs.ingest import StopRequest, finish_checkpoints, root_cause
from streaming_jobs.ingest_config import (
    UsageError,
    build_parser,
    parse_config,
    read_password,
    source_options,
)
from streaming_jobs.progress import BatchStats, ProgressReporter, RunStats, progress_line

BASE = ["--broker", "tcp://127.0.0.1:1883", "--topic", "a/#", "--table", "t", "--checkpoint", "c"]


def test_defaults() -> None:
    config, print_config = parse_config(BASE, environ={})
    assert not print_config
    assert (config.qos, config.payload_format, config.trigger) == (
        "1",
        "binary",
        "processing-time=1 second",
    )
    assert config.trigger_interval == "1 second"
    assert (config.log_level, config.spark_log_level, config.stop_timeout) == ("INFO", "WARN", 60)
    assert config.username is None and config.topic_columns == () and config.partition_by == ()


def test_precedence_flag_over_file_over_environment(tmp_path: Path) -> None:
    config_file = tmp_path / "ingest.toml"
    config_file.write_text('username = "from-file"\nqos = 2\ntrigger = "available-now"\n')
    argv = [*BASE, "--config", str(config_file), "--qos", "0"]
    config, _ = parse_config(argv, environ={"MQTT_USERNAME": "from-env"})
    assert (config.qos, config.username, config.trigger_interval) == ("0", "from-file", None)
    config, _ = parse_config([*BASE, "--username", "flag"], environ={"MQTT_USERNAME": "env"})
    assert config.username == "flag"
    config, _ = parse_config(BASE, environ={"MQTT_USERNAME": "env"})
    assert config.username == "env"


def test_repeatable_flags_from_the_file_are_replaced_by_the_command_line(tmp_path: Path) -> None:
    config_file = tmp_path / "ingest.toml"
    config_file.write_text(
        'broker = "tcp://127.0.0.1:1883"\ntopic = ["x/#", "y/#"]\ntable = "t"\n'
        'checkpoint = "c"\nspark-conf = ["spark.a=1"]\n'
    )
    config, _ = parse_config(["--config", str(config_file)], environ={})
    assert config.topic == ("x/#", "y/#") and config.spark_settings == {"spark.a": "1"}
    config, _ = parse_config(["--config", str(config_file), "--topic", "z/#"], environ={})
    assert config.topic == ("z/#",)


def test_topic_columns_and_partition_by() -> None:
    argv = [*BASE, "--topic-columns", "_,site,,device,_", "--partition-by", "date, site"]
    config, _ = parse_config(argv, environ={})
    assert config.topic_columns == (None, "site", None, "device")
    assert config.partition_by == ("date", "site")
    with pytest.raises(UsageError, match="site given twice"):
        parse_config([*BASE, "--topic-columns", "site,Site"], environ={})


def test_cluster_by_instead_of_partition_by() -> None:
    config, _ = parse_config([*BASE, "--cluster-by", "topic, date"], environ={})
    assert (config.cluster_by, config.partition_by) == (("topic", "date"), ())
    with pytest.raises(UsageError, match="partitioned or clustered, not both"):
        parse_config([*BASE, "--cluster-by", "topic", "--partition-by", "date"], environ={})
    with pytest.raises(UsageError, match="--cluster-by: 'to pic' is not a column name"):
        parse_config([*BASE, "--cluster-by", "to pic"], environ={})


@pytest.mark.parametrize(
    ("flag", "flag_value", "file_value", "bad", "error"),
    [
        ("--table-checkpoint-interval", 10, 50, ("0", "-5"), "must be at least 1"),
        ("--log-retention", 0.5, 168, ("0", "-2", "nan"), "must be more than 0 hours"),
    ],
)
def test_created_table_settings_from_flag_or_file(
    tmp_path: Path, flag: str, flag_value: float, file_value: float, bad: tuple[str, ...],
    error: str,
) -> None:  # fmt: skip
    """Unset, the writer picks (decisions 23 and 45); a flag or the config file's key sets it."""
    field = flag[2:].replace("-", "_")
    config, _ = parse_config(BASE, environ={})
    assert getattr(config, field) is None
    config, _ = parse_config([*BASE, flag, str(flag_value)], environ={})
    assert getattr(config, field) == flag_value
    config_file = tmp_path / "ingest.toml"
    config_file.write_text(f"{flag[2:]} = {file_value}\n")
    config, _ = parse_config([*BASE, "--config", str(config_file)], environ={})
    assert getattr(config, field) == file_value
    for value in bad:
        with pytest.raises(UsageError, match=f"{flag} {error}"):
            parse_config([*BASE, flag, value], environ={})


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_max_messages_per_trigger_is_checked_against_the_option_table(bad: str) -> None:
    """The range is the option's (connector/options/table.py), checked once there: 0 is
    refused, not taken for "no limit"."""
    with pytest.raises(UsageError, match=f"--max-messages-per-trigger must be >= 1, got {bad}"):
        parse_config([*BASE, "--max-messages-per-trigger", bad], environ={})


def test_password_from_environment_or_file(tmp_path: Path) -> None:
    config, _ = parse_config([*BASE, "--username", "u", "--password-env", "PW"], environ={})
    assert read_password(config, {"PW": "from-env"}) == "from-env"
    secret = tmp_path / "secret"
    secret.write_text("from-file\nignored\n")
    with_file = [*BASE, "--username", "u", "--password-file", str(secret)]
    with pytest.raises(UsageError, match="--allow-password-over-plain-tcp") as refused:
        parse_config(with_file, {})  # tcp:// without the opt-in, loopback included
    assert "from-file" not in str(refused.value)
    config, _ = parse_config([*with_file, "--allow-password-over-plain-tcp"], {})
    assert read_password(config, {"MQTT_PASSWORD": "from-env"}) == "from-file"
    assert "from-file" not in json.dumps(config.as_dict())


def test_tls_flags_become_source_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    argv = [*BASE[:1], "ssl://broker:8883", *BASE[2:], "--cafile", str(ca), "--insecure"]
    config, _ = parse_config(argv, environ={})
    options = source_options(config)
    assert options["tls.caFile"] == str(ca) and options["tls.verify"] == "false"
    assert options["walPath"].endswith("/c/mqtt-wal")


def test_source_options_accepts_a_plain_namespace() -> None:
    """bench/ingest.py builds options from ``build_parser().parse_args``."""
    args = build_parser().parse_args([*BASE, "--client-id", "bench", "--partition-data", "wal"])
    options = source_options(args)
    assert (options["clientId"], options["partitionData"], options["qos"]) == ("bench", "wal", "1")


SOURCE_FAILURE = """[STREAM_FAILED] Query [id = 1f, runId = 2e] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform \
latestOffset: Traceback (most recent call last):
  File "/x/pyspark/sql/streaming/python_streaming_source_runner.py", line 80, in main
    offset = reader.latestOffset()
  File "/x/connector/spark/reader/stream_reader.py", line 60, in receiver
    receiver.start()
connector.mqtt.errors.NotAuthorized: not authorized (CONNACK return code 5)
 SQLSTATE: 38000
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.pythonStreamingDataSourceRuntimeError
"""
ONE_LINE_SOURCE_FAILURE = """[STREAM_FAILED] Query [id = 1f, runId = 2e] terminated with \
exception: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source \
perform initialOffset: connector.mqtt.errors.BrokerUnreachable: cannot connect to tcp://h:1: \
refused
 SQLSTATE: 38000 SQLSTATE: XXKST
=== Streaming Query ===
"""
WRITER_FAILURE = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: \
An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/x/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
pyspark.errors.exceptions.captured.AnalysisException: [DELTA_FAILED_TO_MERGE_FIELDS] Failed \
to merge fields 'temp' and 'temp'. SQLSTATE: 22005
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SOURCE_FAILURE, "NotAuthorized: not authorized (CONNACK return code 5)"),
        (ONE_LINE_SOURCE_FAILURE, "BrokerUnreachable: cannot connect to tcp://h:1: refused"),
        ("[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
         "connector.options.source.InvalidOptionError: option 'qos' must be 0..2, got 3\n"
         " SQLSTATE: 38000", "InvalidOptionError: option 'qos' must be 0..2, got 3"),
        ("[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source "
         "perform latestOffset: connector.receiver.receiver.ReceiverFailed: the MQTT receiver "
         "failed: lost", "MQTT receiver: lost"),
        (WRITER_FAILURE, "AnalysisException: [DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge "
         "fields 'temp' and 'temp'. SQLSTATE: 22005"),
        ("[PARSE_SYNTAX_ERROR] Syntax error at or near ','.\n== SQL ==\nx,,\n",
         "[PARSE_SYNTAX_ERROR] Syntax error at or near ','."),
        ("An error occurred while calling o41.start.\n: java.io.IOException: No space left on "
         "device\n\tat java.base/x", "IOException: No space left on device"),
        ("An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
         "call last):\n  File \"/x/batch_writer.py\", line 9, in __call__\n    writer.save(p)\n"
         "py4j.protocol.Py4JJavaError: An error occurred while calling o99.save.\n"
         ": java.nio.file.AccessDeniedException: /data/t/_delta_log\n\tat x.y(Z.java:1)\n",
         "AccessDeniedException: /data/t/_delta_log"),
    ],
)  # fmt: skip
def test_root_cause_is_the_line_that_says_what_went_wrong(text: str, expected: str) -> None:
    assert root_cause(text) == expected


def _progress(batch: int, rows: int, end: int, latest: int, added: bool = True) -> dict:
    """A batch's progress reading the WAL up to ``end`` with ``latest`` stored, its source's
    report made by the source's own code."""
    status = ShardStatus("w", 0, latest, committed=0)
    report = progress_report({"wal": "w", "offset": latest}, [status], [end])
    source = {
        "endOffset": json.dumps({"wal": "w", "offset": end}),
        "latestOffset": json.dumps(report),
    }
    durations = {"addBatch": 400, "triggerExecution": 500} if added else {"latestOffset": 1}
    return {
        "batchId": batch,
        "numInputRows": rows,
        "processedRowsPerSecond": rows / 0.5,
        "durationMs": durations,
        "sources": [source],
    }


def test_progress_line_reports_rate_backlog_and_lag() -> None:
    stats = BatchStats(7, 100, 3, newest_us=1_000_000_000, written_at=1_000.25)
    line = progress_line(_progress(7, 100, end=500, latest=620), stats)
    assert line == (
        "batch 7: 100 rows, 3 dead-letter, 200 rows/s, took 0.50 s, backlog 120, lag 0.25 s"
    )
    assert "backlog -" in progress_line({"batchId": 1, "sources": []}, None)


class _Query:
    def __init__(self, progresses: list[dict]) -> None:
        self.recentProgress = progresses
        self.lastProgress = progresses[-1] if progresses else None


def test_reporter_logs_each_finished_batch_once(caplog: pytest.LogCaptureFixture) -> None:
    stats = RunStats()
    stats.record(BatchStats(0, 5, 1, None, 0.0))
    stats.record(BatchStats(1, 7, 0, None, 0.0))
    reporter = ProgressReporter(stats)
    caplog.set_level("INFO", logger="streaming_jobs.progress")
    progresses = [_progress(0, 5, 5, 5), _progress(1, 7, 12, 12), _progress(2, 0, 12, 12, False)]
    reporter.poll(_Query(progresses[:1]))
    reporter.poll(_Query(progresses))
    reporter.poll(_Query(progresses))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["batch 0", "batch 1"]
    summary = reporter.summary("stopped")
    assert summary.startswith(
        "stopped: 2 batches, 12 messages: 11 table rows, 1 dead-letter rows, "
    )
    assert summary.endswith("rows/s on average")


class _Closing:
    """A batch writer's ``close``: records the timeout, reports whether it finished."""

    def __init__(self, finishes: bool) -> None:
        self.finishes = finishes
        self.timeouts: list[float | None] = []

    def close(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return self.finishes


def test_the_job_waits_for_a_checkpoint_in_progress_unless_told_to_stop_now(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calm, exiting, hurried = StopRequest(), StopRequest(), StopRequest()
    exiting.budget = 10.0  # Spark's JVM runs its shutdown hooks
    hurried.now.set()  # a second signal
    waits = []
    for stop in (calm, exiting, hurried):
        writer = _Closing(finishes=True)
        finish_checkpoints(writer, stop, 60.0)
        waits += writer.timeouts
    assert waits == [60.0, 0.0, 0.0]

    with caplog.at_level(logging.INFO, logger="streaming_jobs.ingest"):
        finish_checkpoints(_Closing(finishes=False), calm, 60.0)
    assert [r.getMessage() for r in caplog.records] == [
        "a Delta checkpoint or compaction was still running; it is done again later "
        "(the tables are complete)"
    ]


def test_run_stats_keep_totals_of_every_batch_and_only_recent_batches() -> None:
    """A run of months records millions of batches: totals stay exact, memory stays bounded."""
    from streaming_jobs.progress import RECENT_BATCHES

    stats = RunStats()
    count = RECENT_BATCHES * 3
    for batch in range(count):
        stats.record(
            BatchStats(batch, rows=2, dead_letters=batch % 2, newest_us=None, written_at=0)
        )
    stats.record(BatchStats(count - 1, rows=5, dead_letters=0, newest_us=None, written_at=0))
    assert stats.totals() == (count, 2 * (count - 1) + 5, count // 2 - 1)
    latest = stats.latest()
    assert latest is not None and (latest.batch_id, latest.rows) == (count - 1, 5)
    assert stats.get(0) is None and stats.get(count - RECENT_BATCHES) is not None
    assert len(stats._recent) == RECENT_BATCHES


PRINT_CONFIG = ["--broker", "tcp://127.0.0.1:1", "--topic", "t/#", "--table", "t", "--checkpoint",
                "c", "--print-config"]  # fmt: skip


@pytest.mark.parametrize("flags", [["--help"], PRINT_CONFIG], ids=["help", "print-config"])
def test_a_reader_that_closes_the_pipe_early_is_no_error(flags: list[str]) -> None:
    """``ingest.py --help | head -1``, the reader gone before the job writes: exit 0 and
    nothing on stderr, not a BrokenPipeError."""
    import subprocess
    import sys

    from devtools import REPO_ROOT

    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "streaming_jobs" / "ingest.py"), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has even imported the job
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
