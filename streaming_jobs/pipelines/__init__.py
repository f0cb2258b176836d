"""``format("mqtt")`` in Spark Declarative Pipelines (``spark-pipelines``, Spark 4.1+).

``mqtt_ingest/`` is an example pipeline (its spec and its definitions file);
:mod:`streaming_jobs.pipelines.launch` runs ``spark-pipelines`` with the local Spark Connect
server configured for Delta (docs/deployment.md, "Declarative pipelines").
"""
