"""Developer tooling: the demo, local brokers, jar pruning, readers for tests and benchmarks.

Not part of the wheel (which ships ``connector``, ``streaming_jobs`` and ``pyspark_mqtt``):
it runs from a checkout of the repository. It may import the product; the product never
imports it. ``tests/`` and ``bench/`` both use it; it imports neither.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root: where ``python -m connector.mqtt`` and the other commands run."""
