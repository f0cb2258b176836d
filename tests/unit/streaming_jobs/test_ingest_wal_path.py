"""Where the ingest job puts the WAL when ``walPath`` is not given: beside the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.ingest_config import UsageError, default_wal_path


def test_a_local_checkpoint_gets_a_local_wal_inside_it(tmp_path: Path) -> None:
    assert default_wal_path(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt" / "mqtt-wal")


@pytest.mark.parametrize(
    ("checkpoint", "wal"),
    [
        ("s3://bucket/ckpt/", "s3://bucket/ckpt/mqtt-wal"),
        (
            "s3://bucket/ckpt?endpoint_override=127.0.0.1:9000&scheme=http",
            "s3://bucket/ckpt/mqtt-wal?endpoint_override=127.0.0.1:9000&scheme=http",
        ),
        ("/Volumes/main/iot/state/ckpt", "/Volumes/main/iot/state/ckpt/mqtt-wal"),
    ],
)
def test_a_checkpoint_on_shared_storage_keeps_the_wal_there(checkpoint: str, wal: str) -> None:
    assert default_wal_path(checkpoint) == wal


def test_a_checkpoint_uri_the_wal_cannot_use_asks_for_wal_path() -> None:
    with pytest.raises(UsageError, match=r"s3a:// is not supported.*--source-option walPath="):
        default_wal_path("s3a://bucket/ckpt")
