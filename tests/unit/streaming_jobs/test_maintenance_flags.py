"""The ingest job's table-maintenance flags: defaults, sizes and durations with units, a
config file's keys, and a retention below Delta's safety check refused unless the user turns
Delta's check off."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.compaction_policy import DEFAULT_SMALL_FILES, DEFAULT_TARGET_BYTES, MIB
from streaming_jobs.ingest_config import UsageError, parse_config

BASE = ["--broker", "tcp://127.0.0.1:1883", "--topic", "a/#", "--table", "/t", "--checkpoint", "/c"]


def test_defaults_compact_and_vacuum_daily() -> None:
    config, _ = parse_config(BASE, environ={})
    assert (config.compaction, config.target_file_size, config.small_files) == (
        "on",
        DEFAULT_TARGET_BYTES,
        DEFAULT_SMALL_FILES,
    )
    assert (config.vacuum_every, config.vacuum_retention) == (86400.0, None)


def test_flags_take_units_and_off() -> None:
    config, _ = parse_config(
        [*BASE, "--target-file-size", "64MiB", "--vacuum-every", "off", "--compaction", "off"],
        environ={},
    )
    assert (config.target_file_size, config.vacuum_every, config.compaction) == (
        64 * MIB,
        None,
        "off",
    )
    config, _ = parse_config([*BASE, "--vacuum-every", "30m"], environ={})
    assert config.vacuum_every == 1800.0


def test_a_config_file_sets_them_by_key(tmp_path: Path) -> None:
    toml = tmp_path / "job.toml"
    toml.write_text('target-file-size = "512KiB"\nsmall-files = 40\nvacuum-every = "12h"\n')
    config, _ = parse_config([*BASE, "--config", str(toml)], environ={})
    assert (config.target_file_size, config.small_files, config.vacuum_every) == (
        512 * 1024,
        40,
        43200.0,
    )


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--target-file-size", "12x"], "not a size: '12x'"),
        (["--vacuum-every", "3x"], "not a duration: '3x'"),
        (["--small-files", "10"], "at least 23 files"),
        (["--vacuum-retention", "24"], "below Delta's safe 168 hours"),
    ],
)
def test_bad_values_are_refused_naming_the_flag(
    flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises((UsageError, SystemExit)) as raised:
        parse_config([*BASE, *flags], environ={})
    assert error in str(raised.value) + capsys.readouterr().err


def test_a_short_retention_is_taken_when_delta_s_check_is_off() -> None:
    check_off = "spark.databricks.delta.retentionDurationCheck.enabled=false"
    config, _ = parse_config(
        [*BASE, "--vacuum-retention", "1", "--spark-conf", check_off], environ={}
    )
    assert config.vacuum_retention == 1.0
