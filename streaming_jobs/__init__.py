"""Jobs that land the ``mqtt`` source in Delta tables (``streaming_jobs/ingest.py``)."""
