"""Jobs that land the ``mqtt`` source in Delta tables (``spark-submit streaming_jobs/ingest.py``)."""
