# Databricks notebook source
# MAGIC %md
# MAGIC # MQTT → Delta
# MAGIC
# MAGIC Drains what the broker has queued for this query's persistent MQTT session into a Delta
# MAGIC table, exactly once, then stops (`Trigger.AvailableNow`): schedule it as a job to land
# MAGIC the backlog every few minutes, or switch the trigger to `processingTime` to keep it running.
# MAGIC The first run makes the session (`create_session`): from then on the broker queues for the
# MAGIC query between runs (docs/delivery.md, "The first run").
# MAGIC
# MAGIC * JSON payloads are parsed with `from_json` and the **schema** widget; a payload that does
# MAGIC   not parse keeps its text in `malformed_payload` (its typed columns are null).
# MAGIC * Needs the `mqtt-lakehouse-connector` wheel on the cluster, installed with `--no-deps`
# MAGIC   (it provides `format("mqtt")`); Delta is built into Databricks Runtime.
# MAGIC * **checkpoint** can live on a volume or DBFS. The source's write-ahead log (**wal_path**)
# MAGIC   must be a driver-local path that survives as long as the checkpoint does: by default it
# MAGIC   is `<checkpoint>/mqtt-wal` when the checkpoint is a local path, and the source's default
# MAGIC   (`$MQTT_WAL_ROOT/<clientId>`) otherwise. See docs/deployment.md, "Running on Databricks".
# MAGIC
# MAGIC Outside Databricks (no `dbutils`) the parameters come from the environment variables
# MAGIC `MQTT_BROKER_URL`, `MQTT_TOPIC`, `MQTT_QOS`, `MQTT_TABLE`, `MQTT_CHECKPOINT`,
# MAGIC `MQTT_WAL_PATH`, `MQTT_CLIENT_ID` and `MQTT_SCHEMA`, or the defaults below; the chart of
# MAGIC the source's figures is written to `MQTT_PLOT_PATH` (default `./data/mqtt-progress.png`).

# COMMAND ----------

import os
from datetime import timedelta
from typing import Any, cast

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from connector.source import MqttDataSource, create_session
from connector.spark.reader.progress_frame import progress_frame

# Parameters: notebook widgets on Databricks; environment variables or defaults elsewhere.
DEFAULTS = {
    "broker": ("MQTT_BROKER_URL", "tcp://localhost:1883"),
    "topic": ("MQTT_TOPIC", "plant/+/+/telemetry"),
    "qos": ("MQTT_QOS", "1"),
    "table": ("MQTT_TABLE", "./data/tables/telemetry"),
    "checkpoint": ("MQTT_CHECKPOINT", "./data/checkpoints/telemetry"),
    "wal_path": ("MQTT_WAL_PATH", ""),
    "client_id": ("MQTT_CLIENT_ID", ""),
    "schema": ("MQTT_SCHEMA", "ts TIMESTAMP, temperature DOUBLE, humidity DOUBLE, seq BIGINT"),
}
dbutils = globals().get("dbutils")  # defined by Databricks


def parameter(name: str) -> str:
    """The widget's value on Databricks; the environment variable or default elsewhere."""
    env_name, fallback = DEFAULTS[name]
    default = os.environ.get(env_name, fallback)
    if dbutils is None:
        return default
    dbutils.widgets.text(name, default, name)
    return dbutils.widgets.get(name)


params = {name: parameter(name).strip() for name in DEFAULTS}
print({k: v for k, v in params.items() if k != "schema"})

# COMMAND ----------

# On Databricks (and under a test runner) a session is already active: reuse it. A plain
# Python process starts a local one with Delta's jars from `make setup`.
spark = SparkSession.getActiveSession()
if spark is None:
    from streaming_jobs.spark_session import local_spark

    spark = local_spark("mqtt-notebook")
# PySpark also finds format("mqtt") by itself (module `pyspark_mqtt`); registering does no harm.
spark.dataSource.register(MqttDataSource)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Read MQTT, parse the JSON payload

# COMMAND ----------


def is_path(location: str) -> bool:
    """A path (local, dbfs:/, /Volumes/..., s3://...) rather than a catalog table name."""
    return "/" in location or location.startswith(".")


def is_local(location: str) -> bool:
    """A path on the driver's own file system (where the WAL can live)."""
    return "://" not in location and not location.startswith(("dbfs:", "/dbfs/", "/Volumes/"))


wal_path = params["wal_path"]
if not wal_path and is_local(params["checkpoint"]):
    wal_path = os.path.join(os.path.abspath(params["checkpoint"]), "mqtt-wal")

options = {"brokerUrl": params["broker"], "topics": params["topic"], "qos": params["qos"]}
if wal_path:
    options["walPath"] = wal_path
if params["client_id"]:
    options["clientId"] = params["client_id"]
# The first run makes the broker session: from here on the broker queues for this query. Once
# the session exists (its WAL does), this does nothing.
create_session(options)
messages = spark.readStream.format("mqtt").options(**options).load()

schema = params["schema"] + ", _corrupt_record STRING"
parsed = messages.withColumn(
    "data",
    F.from_json(
        F.col("payload").cast("string"), schema, {"columnNameOfCorruptRecord": "_corrupt_record"}
    ),
)
data_type = cast(StructType, parsed.schema["data"].dataType)  # from_json's struct schema
fields = [f for f in data_type.fieldNames() if f != "_corrupt_record"]
rows = parsed.select(
    "topic",
    *[F.col(f"data.{f}").alias(f) for f in fields],
    F.col("data._corrupt_record").alias("malformed_payload"),
    "qos",
    F.col("timestamp").alias("received_at"),
    "offset",
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Write to Delta, exactly once, and stop when the broker's queue is drained

# COMMAND ----------

writer = (
    rows.writeStream.format("delta")
    .option("checkpointLocation", params["checkpoint"])
    .trigger(availableNow=True)
)
table = params["table"]
query = writer.start(table) if is_path(table) else writer.toTable(table)
query.awaitTermination()
if query.exception() is not None:
    raise RuntimeError(f"the ingestion failed: {query.exception()}")
print(f"query {query.id}: the broker's queue is drained")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The table

# COMMAND ----------

landed = spark.read.format("delta").load(table) if is_path(table) else spark.table(table)
print(f"{table}: {landed.count()} rows")
latest = landed.orderBy(F.col("offset").desc())
display = globals().get("display")  # defined by Databricks
if display is not None:
    display(latest)
else:
    latest.show(20, truncate=False)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The source's figures over the run
# MAGIC
# MAGIC `progress_frame` lays out the figures the source reports in the query's progress, one row
# MAGIC per progress report and receiver (docs/operations.md, "Metrics in the query progress").
# MAGIC The chart shows each receiver's backlog (messages in its write-ahead log beyond each
# MAGIC batch) and its receive rate.
# MAGIC It needs pandas and matplotlib, which Databricks Runtime has.

# COMMAND ----------


def rate_column(frame: Any) -> str:
    """The receivers' receive rate, else (a report without it) the query's input rate."""
    return "receiveRate" if "receiveRate" in frame.columns else "inputRowsPerSecond"


def chart(frame: Any) -> Any:
    """Backlog and receive rate over time, a matplotlib ``Figure`` outside ``pyplot`` (no GUI:
    saving renders it with Agg, and nothing is left open)."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    rate = rate_column(frame)
    fig = Figure(figsize=(9, 5), layout="constrained")
    backlog_axes, rate_axes = fig.subplots(2, 1, sharex=True)
    for (source, receiver), rows in frame.groupby(["source", "receiver"]):
        label = f"receiver {receiver}" if frame["source"].nunique() == 1 else f"{source}/{receiver}"
        backlog_axes.plot(rows["timestamp"], rows["backlog"], marker=".", label=label)
        if rate != "inputRowsPerSecond":
            rate_axes.plot(rows["timestamp"], rows[rate], marker=".", label=label)
    if rate == "inputRowsPerSecond":  # one figure per progress report, the same on every row
        reports = frame.drop_duplicates("timestamp")
        rate_axes.plot(reports["timestamp"], reports[rate], marker=".", label="query")
    locator = AutoDateLocator()
    rate_axes.xaxis.set_major_locator(locator)
    rate_axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    first, last = frame["timestamp"].min(), frame["timestamp"].max()
    if first == last:  # one report (a short AvailableNow run): a minute around it
        rate_axes.set_xlim(first - timedelta(seconds=30), last + timedelta(seconds=30))
    backlog_axes.set_ylabel("backlog (messages)")
    rate_axes.set_ylabel(f"{rate} (messages/s)")
    rate_axes.set_xlabel("progress report time (UTC)")
    backlog_axes.legend()
    rate_axes.legend()
    return fig


progress = None  # the frame
fig = None  # its chart
try:
    progress = progress_frame(query)
    if progress.empty:
        print("no chart of the source's figures: the query reported none")
    else:
        fig = chart(progress)
except ImportError as missing:  # pandas or matplotlib
    print(f"no chart of the source's figures: {missing}")
if fig is not None and display is not None:
    display(fig)
elif fig is not None:
    plot_path = os.environ.get("MQTT_PLOT_PATH", "./data/mqtt-progress.png")
    os.makedirs(os.path.dirname(os.path.abspath(plot_path)), exist_ok=True)
    fig.savefig(plot_path)
    print(f"chart of the source's figures: {plot_path}")
