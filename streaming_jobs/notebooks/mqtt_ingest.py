# Databricks notebook source
# MAGIC %md
# MAGIC # MQTT → Delta
# MAGIC
# MAGIC Drains what the broker has queued for this query's persistent MQTT session into a Delta
# MAGIC table, exactly once, then stops (`Trigger.AvailableNow`): schedule it as a job to land
# MAGIC the backlog every few minutes, or switch the trigger to `processingTime` to keep it running.
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
# MAGIC `MQTT_WAL_PATH`, `MQTT_CLIENT_ID` and `MQTT_SCHEMA`, or the defaults below.

# COMMAND ----------

import os
from typing import cast

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from connector.source import MqttDataSource

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

reader = (
    spark.readStream.format("mqtt")
    .option("brokerUrl", params["broker"])
    .option("topics", params["topic"])
    .option("qos", params["qos"])
)
if wal_path:
    reader = reader.option("walPath", wal_path)
if params["client_id"]:
    reader = reader.option("clientId", params["client_id"])
messages = reader.load()

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
