"""An S3-compatible server on loopback for tests and benchmarks of WALs on object storage:
s3proxy (`make setup` puts its jar under .brokers/s3proxy), storing into its own folder.

Its credentials are test-only values (:data:`TEST_ENVIRONMENT`) that a process puts into its
environment before any S3 client or Spark JVM starts, the way a user's credential chain would
provide them: pyarrow reads them there and Spark's Python workers inherit them. Instance
metadata lookups are disabled, so the S3 client never leaves 127.0.0.1.
"""

from __future__ import annotations

import os
from pathlib import Path

from devtools.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[1]
S3PROXY_DIR = REPO / ".brokers" / "s3proxy"
TEST_ACCESS_KEY = "local-test-access-key"
TEST_SECRET_KEY = "local-test-secret-key"
TEST_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": TEST_SECRET_KEY,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def use_test_credentials() -> None:
    """Put the test credentials into this process's environment (children inherit them)."""
    for key, value in TEST_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


def s3proxy_jar() -> Path:
    """The installed s3proxy jar; FileNotFoundError pointing at `make setup` without one."""
    jars = sorted(S3PROXY_DIR.glob("s3proxy-*.jar"))
    if not jars:
        raise FileNotFoundError(f"s3proxy is not installed under {S3PROXY_DIR}; run `make setup`")
    return jars[-1]


class S3Server(BrokerProcess):
    """s3proxy on 127.0.0.1 keeping its objects in ``<workdir>/data``; its port is kept across
    restarts, so a stopped server comes back at the same address with the same objects."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(
            "s3proxy", workdir, ready_text="Started", start_timeout=60.0, stop_timeout=10.0
        )
        self._jar = s3proxy_jar()
        self.data = workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)

    def _command(self) -> list[str]:
        conf = self.workdir / "s3proxy.conf"
        conf.write_text(
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={TEST_ACCESS_KEY}\n"
            f"s3proxy.credential={TEST_SECRET_KEY}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={self.data}\n"
        )
        return ["java", "-jar", str(self._jar), "--properties", str(conf)]

    def uri(self, bucket: str, prefix: str) -> str:
        """A ``walPath`` for ``bucket/prefix`` on this server."""
        return (
            f"s3://{bucket}/{prefix}?endpoint_override=127.0.0.1:{self.port}"
            "&scheme=http&region=us-east-1"
        )

    def make_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (the server must be running)."""
        import pyarrow.fs as pafs

        filesystem = pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        )
        filesystem.create_dir(bucket)
