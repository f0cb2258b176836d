"""A streaming query that writes JSON files to MQTT until it is killed: the subject of
``test_sink_kill.py``. One file per micro-batch (``maxFilesPerTrigger`` 1), MQTT 5 (each
message carries its idempotency key), QoS 1.

``python -m tests.chaos.sink_query BROKER_URL INPUT_DIR CHECKPOINT_DIR``
"""

from __future__ import annotations

import sys

from streaming_jobs.spark_session import local_spark

TOPIC_PREFIX = "sink-kill/"


def main(broker_url: str, folder: str, checkpoint: str) -> None:
    spark = local_spark("sink-kill")
    frame = (
        spark.readStream.schema("id BIGINT")
        .option("maxFilesPerTrigger", "1")
        .json(folder)
        .selectExpr(
            f"concat('{TOPIC_PREFIX}', cast(id % 4 as string)) AS topic",
            "cast(id as string) AS payload",
        )
    )
    query = (
        frame.writeStream.format("mqtt")
        .option("brokerUrl", broker_url)
        .option("mqttVersion", "5")
        .option("qos", "1")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
