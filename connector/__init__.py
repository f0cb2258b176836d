"""MQTT to Delta: a PySpark Structured Streaming source for MQTT with exactly-once delivery."""

__version__ = "0.1.0"
