"""``MqttDataSource``: the PySpark data source registered as ``format("mqtt")``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from .options import SourceOptions
from .reader import MqttStreamReader
from .schema import SCHEMA_DDL


class MqttDataSource(DataSource):
    """Streaming-only source of MQTT messages; options are validated when it is created
    (at ``load()``), before any connection."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "mqtt"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return MqttStreamReader(self.parsed)
