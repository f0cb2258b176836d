"""``MqttDataSource``: the PySpark data source registered as ``format("mqtt")``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from .options import SourceOptions
from .reader import MqttStreamReader
from .schema import schema_ddl
from .sparkplug_schema import SCHEMA_DDL as SPARKPLUG_DDL


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
        """The rows' DDL: with a ``properties`` column for ``mqttVersion`` 5; Sparkplug rows
        for ``payloadFormat`` ``sparkplug``."""
        if self.parsed.sparkplug:
            return SPARKPLUG_DDL
        return schema_ddl(self.parsed.mqtt5)

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return MqttStreamReader(self.parsed)
