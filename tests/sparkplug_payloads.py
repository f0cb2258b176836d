"""Moved to :mod:`devtools.sparkplug_payloads`: this name is kept only for
``tests/unit/bench/test_bench_sparkplug.py``, until it imports ``devtools.sparkplug_payloads``
(then delete this module)."""

from devtools.sparkplug_payloads import pb as pb
