"""A Spark session with Delta for local runs and tests, using jars fetched by ``make setup``.

Delta's JVM jars do not come with the ``delta-spark`` pip package; ``make setup`` copies
``io.delta:delta-spark_<spark>_2.13`` and its runtime dependencies into ``.jars/`` so runs need
no network. ``DELTA_JARS_DIR`` points elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_jars() -> list[str]:
    """Paths of the Delta jars to hand to Spark; empty when none were fetched."""
    folder = Path(os.environ.get("DELTA_JARS_DIR", REPO_ROOT / ".jars"))
    return sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []


def prepare_local_environment() -> None:
    """Python workers must run this interpreter and connect back over loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def with_delta(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Add Delta's SQL extension, catalog and (when present) the local jars to ``builder``."""
    jars = delta_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        log.warning("no Delta jars in %s: run `make setup`", REPO_ROOT / ".jars")
    return builder.config("spark.sql.extensions", DELTA_EXTENSION).config(
        "spark.sql.catalog.spark_catalog", DELTA_CATALOG
    )


def local_spark(
    app_name: str = "mqtt-ingest", master: str = "local[2]", **conf: str
) -> SparkSession:
    """A local Spark session with Delta, tuned for small, quick micro-batches."""
    prepare_local_environment()
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.metricsEnabled", "false")
        .config("spark.databricks.delta.snapshotPartitions", "2")
    )
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    return with_delta(builder).getOrCreate()
