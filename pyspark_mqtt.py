"""Lets PySpark find ``format("mqtt")`` by itself: it imports top-level ``pyspark_*`` modules
and registers their ``DefaultSource``."""

from connector.source import MqttDataSource

DefaultSource = MqttDataSource
