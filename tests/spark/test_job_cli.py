"""The ingest job's command line, run as a subprocess: failures before Spark starts are fast,
one line on stderr and a non-zero exit, and so is a table path Delta cannot use (before the
query starts); ``--config`` TOML files; ``--help`` and docs/options.md."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from connector.receiver.broker_session import SUBSCRIPTIONS_FILE
from connector.wal import WalReader
from devtools import REPO_ROOT
from devtools.broker_process import free_port
from streaming_jobs.ingest_config import build_parser
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import batch_files, run_job

FAST = 10.0
"""Seconds a run that fails before Spark starts may take (Python start and imports)."""


def _args(tmp_path: Path, *extra: str, broker: str = "tcp://127.0.0.1:1883") -> list[str]:
    return [
        "--broker", broker, "--topic", "plant/#", "--table", str(tmp_path / "t"),
        "--checkpoint", str(tmp_path / "c"), *extra,
    ]  # fmt: skip


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one stderr line, got:\n{stderr}"
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        (["--payload-format", "json"], "--payload-format json needs --schema"),
        (["--qos", "3"], "--qos"),
        (["--payload-format", "xml"], "--payload-format"),
        (["--broker", "http://broker"], "--broker"),
        (["--topic", "a/#/b"], "--topic"),
        (["--topic-columns", "site,2nd"], "--topic-columns"),
        (["--partition-by", "a b"], "--partition-by"),
        (["--dead-letter-table", "/tmp/dl"], "--dead-letter-table needs --payload-format"),
        (["--schema", "a INT"], "--schema goes with --payload-format json"),
        (["--trigger", "every 5 seconds"], "--trigger"),
        (["--cafile", "/etc/hostname"], "need an ssl://"),
        (["--insecure"], "--insecure"),
        (["--source-option", "qos=2"], "use --qos"),
        (["--source-option", "keepAlvie=30"], "'keepAlvie'"),
        (["--password-file", "/etc/hostname"], "--password-file needs --username"),
        (["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_bad_flags_fail_fast_with_one_line(tmp_path: Path, extra: list[str], mentions: str) -> None:
    began = time.monotonic()
    done = run_job(_args(tmp_path, *extra))
    assert done.returncode == 2, done
    assert mentions in _one_error_line(done.stderr)
    assert done.stdout == ""
    assert time.monotonic() - began < FAST
    assert not (tmp_path / "c").exists(), "nothing may be created before the flags are valid"


def test_missing_required_flag(tmp_path: Path) -> None:
    done = run_job(["--broker", "tcp://127.0.0.1:1883", "--topic", "a", "--table", "t"])
    assert done.returncode == 2
    assert "--checkpoint is required" in _one_error_line(done.stderr)


def test_unreachable_broker_fails_fast_with_one_line(tmp_path: Path) -> None:
    broker = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    began = time.monotonic()
    done = run_job(_args(tmp_path, broker=broker))
    assert done.returncode == 1, done
    line = _one_error_line(done.stderr)
    assert f"cannot reach the MQTT broker {broker}" in line
    assert "refused" in line.lower()
    assert time.monotonic() - began < FAST


def test_a_table_path_delta_cannot_use_fails_before_the_query_starts(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    (tmp_path / "t").write_text("a file where the table should go")
    done = run_job(_args(tmp_path, broker=broker.url), timeout=180)
    assert done.returncode == 1, done
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "cannot create the Delta tables" in errors[0]
    assert str(tmp_path / "t") in errors[0]
    assert batch_files(tmp_path / "c", "offsets") == []  # no batch ran
    # The session was made before Spark started, so the broker queues for the next run; the
    # WAL it made holds nothing (no retained message on this broker).
    assert (tmp_path / "c" / "mqtt-wal" / SUBSCRIPTIONS_FILE).exists()
    assert WalReader(tmp_path / "c" / "mqtt-wal").read(0, 0).topics == []
    assert "the broker now queues for this job" in done.stdout


def _toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_config_file_with_flag_override_and_environment(tmp_path: Path) -> None:
    config = _toml(
        tmp_path / "ingest.toml",
        f"""
        broker = "tcp://127.0.0.1:1883"
        topic = ["plant/+/telemetry", "plant/+/alarms"]
        table = "{tmp_path / "t"}"
        checkpoint = "{tmp_path / "c"}"
        payload_format = "json"                 # underscores or dashes
        schema = "temp DOUBLE"
        dead-letter-table = "{tmp_path / "dl"}"
        topic-columns = ["_", "site"]
        qos = 2
        keep-payload = true
        source-option = {{ keepAlive = 30 }}
        """,
    )
    done = run_job(
        ["--config", str(config), "--qos", "0", "--no-keep-payload", "--print-config"],
        MQTT_USERNAME="from-env",
    )
    assert done.returncode == 0, done.stderr
    settings = json.loads(done.stdout)
    assert settings["qos"] == "0"  # the command line wins over the file
    assert settings["keep-payload"] is False
    assert settings["topic"] == ["plant/+/telemetry", "plant/+/alarms"]
    assert settings["payload-format"] == "json"
    assert settings["dead-letter-table"] == str(tmp_path / "dl")
    assert settings["topic-columns"] == ",site"
    assert settings["source-option"] == ["keepAlive=30"]
    assert settings["username"] == "from-env"
    assert settings["trigger"] == "processing-time=1 second"  # built-in default


def test_unknown_config_key_is_an_error_naming_it(tmp_path: Path) -> None:
    config = _toml(tmp_path / "ingest.toml", 'broker = "tcp://127.0.0.1:1883"\ntopics = "a/#"\n')
    done = run_job(["--config", str(config)])
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert f"--config {config}: unknown key 'topics'" in line


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("qos = 5\n", "key 'qos': invalid choice: '5'"),
        ('clean-session = "yes"\n', "key 'clean-session' must be true or false"),
        ('password = "hunter2"\n', "key 'password' is not supported"),
        ('broker = ["a", "b"]\n', "key 'broker' takes one value"),
        ("broker = tcp://x\n", "not valid TOML"),
    ],
)
def test_bad_config_values_name_the_key(tmp_path: Path, text: str, mentions: str) -> None:
    config = _toml(tmp_path / "ingest.toml", text)
    done = run_job(_args(tmp_path, "--config", str(config)))
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert mentions in line and str(config) in line
    assert "hunter2" not in done.stderr


def test_help_explains_every_flag_with_examples() -> None:
    done = run_job(["--help"])
    assert done.returncode == 0
    for action in build_parser()._actions:
        for option in action.option_strings:
            assert option in done.stdout
    assert "examples:" in done.stdout and "ingest.toml" in done.stdout


def test_options_doc_lists_every_flag_with_its_default() -> None:
    """docs/options.md (generated from the flag table; the README links to it)."""
    doc = (REPO_ROOT / "docs" / "options.md").read_text()
    section = doc.split("## Flags of the ingest job", 1)[1].split("\n## ", 1)[0]
    missing = [
        option
        for action in build_parser()._actions
        for option in action.option_strings[:1]
        if option not in ("-h",) and not re.search(rf"`{re.escape(option)}[ =`]", section)
    ]
    assert not missing, f"docs/options.md's flag section lacks {missing}"
