"""The PySpark data source ``mqtt``: options, schema, stream reader and the receiver thread."""

from .datasource import MqttDataSource
from .options import InvalidOptionError, SourceOptions
from .reader import DataLossError

__all__ = ["DataLossError", "InvalidOptionError", "MqttDataSource", "SourceOptions"]
