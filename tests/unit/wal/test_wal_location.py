"""Parsing ``walPath`` (connector.wal.location): layouts, refused schemes and secrets."""

from __future__ import annotations

import pytest

from connector.wal.location import WalLocationError, parse_location


@pytest.mark.parametrize(
    ("text", "objects", "scheme"),
    [
        ("/tmp/wal", False, ""),
        ("relative/wal", False, ""),
        ("/Volumes/main/default/landing/wal", True, ""),
        ("/dbfs/mnt/wal", True, ""),
        ("file:///tmp/wal", True, "file"),
        ("s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http", True, "s3"),
        ("gs://bucket/prefix", True, "gs"),
        ("abfss://container@account.dfs.core.windows.net/wal", True, "abfss"),
        ("az://container/wal", True, "az"),
        ("hdfs://namenode:8020/wal", True, "hdfs"),
    ],
)
def test_layouts(text: str, objects: bool, scheme: str) -> None:
    location = parse_location(text)
    assert (location.objects, location.scheme, str(location)) == (objects, scheme, text)


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("s3a://bucket/wal", "write it as s3://"),
        ("wasbs://c@a.blob.core.windows.net/wal", "write it as abfss://"),
        ("dbfs:/mnt/wal".replace(":/", "://"), "/dbfs/"),
        ("ftp://host/wal", "use a local directory or one of"),
    ],
)
def test_unsupported_schemes_are_refused_not_taken_as_directories(text: str, hint: str) -> None:
    with pytest.raises(WalLocationError, match="is not supported") as caught:
        parse_location(text)
    assert hint in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "s3://bucket/wal?secret_key=abc123&access_key=AKIA",
        "s3://bucket/wal?session_token=Zq9xT",
        "abfs://c@a.dfs.core.windows.net/wal?account_key=k",
        "hdfs://user:hunter2@namenode/wal",
    ],
)
def test_secrets_in_the_uri_are_refused_without_repeating_them(text: str) -> None:
    with pytest.raises(WalLocationError, match=r"credential|password") as caught:
        parse_location(text)
    for secret in ("abc123", "AKIA", "Zq9xT", "=k", "hunter2"):
        assert secret not in str(caught.value)


def test_a_store_uri_needs_a_bucket() -> None:
    with pytest.raises(WalLocationError, match="needs a bucket"):
        parse_location("s3://")


def test_shard_locations_keep_the_store_settings() -> None:
    base = parse_location("s3://bucket/wal?endpoint_override=127.0.0.1:9000&scheme=http")
    shard = base.child("shard-1")
    assert shard.text == "s3://bucket/wal/shard-1?endpoint_override=127.0.0.1:9000&scheme=http"
    assert (shard.objects, shard.scheme) == (True, "s3")
    assert parse_location("/tmp/wal").child("shard-0").text == "/tmp/wal/shard-0"
    assert parse_location("file:///tmp/wal").child("shard-0").local_path == "/tmp/wal/shard-0"
