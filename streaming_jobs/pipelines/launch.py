"""Run ``spark-pipelines`` on this machine with Delta: ``python -m streaming_jobs.pipelines.launch
[--state DIR] [--master local[N]] <spark-pipelines arguments>``.

``spark-pipelines`` (PySpark 4.2) starts a Spark Connect server in a JVM of its own and runs the
pipeline through it. That JVM takes its settings from ``PYSPARK_SUBMIT_ARGS``, not from the
``--conf`` and ``--jars`` given to ``spark-pipelines``: those reach the server's
``SparkSession`` in chunks of ten settings, of which PySpark keeps only the last, so Delta's
jars and catalog would go missing at random. This launcher therefore puts the server's settings
in ``PYSPARK_SUBMIT_ARGS``:

* Delta's jars, SQL extension and catalog (:mod:`streaming_jobs.spark_session`);
* a Hive metastore in an embedded Derby database under ``--state``, so the pipeline's tables
  are still in the catalog at the next run (with Spark's in-memory catalog the next run finds
  their files but no table and fails to create them again), and the warehouse (the tables'
  files) beside it;
* the local driver's settings (spawn-free local file system, G1) and loopback only: the Connect
  server listens on 127.0.0.1, on port 15002, which the CLI's client always dials.

The pipeline's own settings (``storage``, ``configuration``) stay in its spec.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from streaming_jobs.spark_session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    JAVA_OPTIONS,
    delta_jars,
    with_local_driver,
)

log = logging.getLogger(__name__)

CONNECT_PORT = 15002
"""The port of the Connect server a local ``spark-pipelines`` run starts: its client connects
to ``sc://localhost``, Spark Connect's default port, whatever the server is told."""
DEFAULT_STATE = Path("data") / "pipelines"
DEFAULT_MASTER = "local[2]"


def server_conf(state: Path) -> dict[str, str]:
    """The local Connect server's Spark settings: Delta, a Derby metastore and the warehouse
    under ``state``, loopback only, small local batches."""
    state = state.resolve()
    metastore = f"jdbc:derby:;databaseName={state / 'metastore_db'};create=true"
    conf = {
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": metastore,
        "spark.sql.warehouse.dir": str(state / "warehouse"),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.streaming.metricsEnabled": "false",
        # Derby writes derby.log into the JVM's working directory unless told otherwise.
        JAVA_OPTIONS: f"-Dderby.system.home={state}",
    }
    return with_local_driver(conf)


def submit_args(conf: Mapping[str, str], jars: Sequence[str]) -> str:
    """``PYSPARK_SUBMIT_ARGS`` for the server's JVM: ``--jars``, one ``--conf`` per setting and
    PySpark's ``pyspark-shell`` resource."""
    args: list[str] = []
    if jars:
        args += ["--jars", ",".join(jars)]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return shlex.join([*args, "pyspark-shell"])


def spark_pipelines() -> str:
    """The ``spark-pipelines`` script next to this Python, else the one on ``PATH``."""
    beside = Path(sys.executable).parent / "spark-pipelines"
    if beside.is_file():
        return str(beside)
    found = shutil.which("spark-pipelines")
    if found is None:
        raise FileNotFoundError("spark-pipelines is not installed (PySpark >= 4.1 has it)")
    return found


def command(arguments: Sequence[str], master: str = DEFAULT_MASTER) -> list[str]:
    """``spark-pipelines --remote <master> <arguments>``: a local server with ``master``."""
    return [spark_pipelines(), "--remote", master, *arguments]


def environment(state: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the server's settings and this
    Python for the pipeline's client and the server's Python workers."""
    env = dict(os.environ if base is None else base)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars = delta_jars()
    if not jars:
        log.warning("no Delta jars found: run `make setup` or set DELTA_JARS_DIR")
    env["PYSPARK_SUBMIT_ARGS"] = submit_args(server_conf(state), jars)
    return env


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """This launcher's own options; everything else goes to ``spark-pipelines``."""
    parser = argparse.ArgumentParser(
        description="Run spark-pipelines with a local Spark Connect server that has Delta.",
        epilog="Other arguments go to spark-pipelines: run, dry-run, --spec, --full-refresh ...",
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=DEFAULT_STATE,
        help="directory of the metastore and the tables' files (default: %(default)s)",
    )
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help="local master (default: %(default)s)"
    )
    return parser.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Replace this process with ``spark-pipelines`` configured for Delta."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    options, rest = parse_args(sys.argv[1:] if argv is None else argv)
    options.state.mkdir(parents=True, exist_ok=True)
    env = environment(options.state)
    argv_out = command(rest, options.master)
    log.info("state in %s; running %s", options.state.resolve(), shlex.join(argv_out))
    os.execve(argv_out[0], argv_out, env)


if __name__ == "__main__":
    main()
