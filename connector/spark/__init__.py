"""The PySpark side of the data source ``mqtt``: the data source (:mod:`.datasource`), the
schema of its rows (:mod:`.schema`), the errors shown in one line (:mod:`.user_errors`), the
stream reader over the WAL (:mod:`.reader`) and the writer that publishes rows
(:mod:`.writer`). The reader and the writer import each other's modules never; they share the
option table (:mod:`connector.options`), the schema and the one-line errors."""
