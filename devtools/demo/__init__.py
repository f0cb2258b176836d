"""End-to-end demo: a simulated sensor fleet -> Mosquitto -> the ingest job -> Delta.

    python -m devtools.demo [--messages N] [--devices N] [--data-dir DIR] [--clean]

Starts a local Mosquitto (persistence on, a large ``max_queued_messages``), creates the ingest
job's persistent session, lets a fleet of sensors publish JSON telemetry on
``plant/<site>/<device>/telemetry`` (half of them QoS 1, half QoS 2, at most 20 messages in
flight each, a few malformed payloads among them) while ``streaming_jobs/ingest.py`` runs as a
subprocess and lands the typed rows in a Delta table and the malformed ones in a dead-letter
table. When the tables hold as many rows as the broker acknowledged, the job gets SIGTERM and
the demo reads both tables from their Delta logs and Parquet files (no second JVM) for the
report: stdout, plus ``report.json``.

Everything lives under ``<data-dir>/demo`` (default ``./data/demo``) and is kept: the report
ends with where the tables are and a few lines of PySpark that read them. ``--clean`` removes
the directory after a successful run (a failed run always keeps it for a look). Each run starts
by removing the previous run's ``<data-dir>/demo``: the sensors' plan is the same every time
(same devices, ``seq`` 0..n-1), so the exactly-once check needs tables holding this run alone.
Exit status: 0 when every published message is in exactly one of the two tables exactly once,
1 otherwise, 130 on Ctrl-C or SIGTERM.

The parts: ``fleet`` (the sensors and their publishers), ``job`` (the ingest job as a
subprocess), ``paths`` (where a run keeps its files), ``tables`` (reading the tables),
``report`` (the checks and the printed report), ``run`` (one run, start to end) and
``__main__`` (the command line).
"""
