"""Benchmarks: each module measures against peers in the same run, writes
``bench/results/<name>.json`` and renders its section of ``bench/REPORT.md`` (``bench.report``)."""
