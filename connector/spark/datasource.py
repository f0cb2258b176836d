"""``MqttDataSource``: the PySpark data source registered as ``format("mqtt")``: a streaming
source (``readStream``) and a writer (``write`` and ``writeStream``,
:mod:`connector.spark.writer.sink`)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from connector.options.source import InvalidOptionError, SourceOptions
from connector.spark.reader.sparkplug_schema import SCHEMA_DDL as SPARKPLUG_DDL
from connector.spark.reader.stream_reader import MqttStreamReader
from connector.spark.schema import schema_ddl
from connector.spark.user_errors import one_line
from connector.spark.writer.options import SinkOptions
from connector.spark.writer.rows import check_schema
from connector.spark.writer.sink import MqttBatchWriter, MqttStreamWriter


class MqttDataSource(DataSource):
    """MQTT as a streaming source and as a sink. The reader's options are validated when
    Spark asks for the schema (at ``load()``), the writer's when it asks for a writer (at
    ``save()`` or ``start()``): both before any connection."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._parsed: SourceOptions | None = None

    @property
    def parsed(self) -> SourceOptions:
        """The reader's options."""
        if self._parsed is None:
            self._parsed = SourceOptions.parse(self.options)
        return self._parsed

    @classmethod
    def name(cls) -> str:
        return "mqtt"

    @one_line
    def schema(self) -> str:
        """The rows' DDL: with a ``properties`` column for ``mqttVersion`` 5; Sparkplug rows
        for ``payloadFormat`` ``sparkplug``."""
        if self.parsed.sparkplug:
            return SPARKPLUG_DDL
        return schema_ddl(self.parsed.mqtt5)

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return MqttStreamReader(self.parsed)

    @one_line
    def writer(self, schema: StructType, overwrite: bool) -> MqttBatchWriter:
        return MqttBatchWriter(self._sink_options(schema, overwrite))

    @one_line
    def streamWriter(self, schema: StructType, overwrite: bool) -> MqttStreamWriter:
        return MqttStreamWriter(self._sink_options(schema, overwrite))

    def _sink_options(self, schema: StructType, overwrite: bool) -> SinkOptions:
        if overwrite:
            raise InvalidOptionError(
                "MQTT cannot overwrite what was published: use mode 'append' (or the "
                "default), outputMode 'append' or 'update'"
            )
        options = SinkOptions.parse(self.options)
        check_schema(schema, options)
        return options
