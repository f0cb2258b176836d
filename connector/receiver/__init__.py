"""The receiver, Spark-free: one MQTT session per client id that stores each message in the WAL
before acknowledging it (:mod:`.receiver`), its shards and their processes (:mod:`.shards`,
:mod:`.shard_handles`, :mod:`.shard_worker`), its figures (:mod:`.figures`), the broker session
made ahead of a query's first run (:mod:`.first_run`, :mod:`.broker_session`), the Sparkplug host
role (:mod:`.sparkplug_host`) and the MQTT 5 properties it keeps (:mod:`.wal_properties`).

Nothing here imports PySpark or pyarrow: a shard process runs with the MQTT layer and the WAL
alone."""
