"""A local Spark Connect server with Delta, started with ``spark-submit`` on a loopback port.

The server is PySpark's own (``org.apache.spark.sql.connect.service.SparkConnectServer``, in
the ``spark-connect`` jar PySpark ships), configured like the project's local sessions
(:mod:`streaming_jobs.spark_session`): Delta's jars, extension and catalog, ``local[2]``, the
local driver's file system and G1 settings. Its Python workers, the streaming source runner
among them, run the ``python`` it is given: whether the connector is installed there decides
what ``format("mqtt")`` finds.

Clients are ``pyspark.sql.connect.session.SparkSession`` sessions. PySpark's classic
``SparkSession.builder.remote(url).getOrCreate()`` returns the same kind of session, but it
also switches the whole process to Connect mode (``SPARK_CONNECT_MODE_ENABLED``), which the
classic sessions of other tests in the same run would inherit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.connect.session import SparkSession as ConnectSession

from devtools.broker_process import LOOPBACK, free_port, port_accepts
from streaming_jobs.spark_session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    delta_jars,
    with_local_driver,
)
from tests.support.spark_processes import SPARK_SUBMIT, START_TIMEOUT, SparkProcess
from tests.support.waiting import wait_until

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STOP_TIMEOUT = 60.0
"""SIGTERM to exit: Spark stops its context and its Python workers first."""

CLIENT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard", "pandas")
"""What PySpark's Connect client imports (``pyspark.sql.connect.utils.check_dependencies``)."""


def missing_client_modules() -> list[str]:
    """The Connect client's modules that this interpreter cannot import."""
    missing = []
    for name in CLIENT_MODULES:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    return missing


def server_conf(port: int, python: Path) -> dict[str, str]:
    """The server's Spark settings: gRPC on ``127.0.0.1:port``, Delta, a small local driver
    whose Python workers run ``python``."""
    conf = {
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.pyspark.python": str(python),
        "spark.pyspark.driver.python": str(python),
    }
    return with_local_driver(conf)


def server_command(port: int, python: Path) -> list[str]:
    """``spark-submit`` of the Connect server with Delta's jars (no application resource:
    the server's class is on Spark's own class path)."""
    command = [str(SPARK_SUBMIT), "--class", SERVER_CLASS, "--master", "local[2]"]
    command += ["--name", "connect-server"]
    jars = delta_jars()
    if jars:
        command += ["--jars", ",".join(jars)]
    for key, value in server_conf(port, python).items():
        command += ["--conf", f"{key}={value}"]
    return command


@dataclass
class ConnectServer:
    """One running Spark Connect server."""

    process: SparkProcess
    port: int

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    @classmethod
    def start(cls, workdir: Path, python: Path) -> ConnectServer:
        """Start a server whose Python workers run ``python``, with ``workdir`` as its working
        directory (not the repository, whose modules would be importable from there)."""
        port = free_port()
        env = {"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
        process = SparkProcess.start(
            "connect-server", server_command(port, python), workdir, env=env
        )
        return cls(process, port)

    def logs(self) -> str:
        return self.process.logs()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until the port accepts connections, then until a client session runs
        ``spark.range(1).count()``."""

        def listening() -> bool:
            self.process.alive_or_fail()
            return port_accepts(LOOPBACK, self.port)

        wait_until(
            listening,
            timeout,
            interval=0.2,
            message=lambda: f"the Connect server never listened on {self.port}\n{self.logs()}",
        )
        session = self.session()
        try:
            counted = session.range(1).count()
        finally:
            session.stop()
        assert counted == 1, f"spark.range(1).count() gave {counted}\n{self.logs()}"

    def session(self) -> ConnectSession:
        """A new client session on this server."""
        return ConnectSession.builder.remote(self.url).create()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to whatever of the server outlives :data:`STOP_TIMEOUT`."""
        self.process.stop(STOP_TIMEOUT)
