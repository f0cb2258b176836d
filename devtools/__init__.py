"""Developer tooling: the demo, local brokers, jar pruning, readers for tests and benchmarks.

Not part of the wheel (which ships ``connector``, ``streaming_jobs`` and ``pyspark_mqtt``):
it runs from a checkout of the repository. It may import the product; the product never
imports it.
"""
