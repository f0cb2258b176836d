"""The options of the data source ``mqtt``, Spark-free: the option table (:mod:`.table`), the
one home of every option's name, default, field and documentation, and the parsed options of
a query that reads (:mod:`.source`). The writer's options build on them
(:mod:`connector.spark.writer.options`); docs/options.md is generated from the table."""
