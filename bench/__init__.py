"""Benchmarks: each module measures against peers in the same run, writes
``bench/results/<name>.json`` and renders its own section of ``bench/REPORT.md``
(``python -m bench.report`` collects them). Shared by all: ``common`` (statistics, the machine,
results files), ``payloads``, ``drainer`` (backlogs, drain workers, tables read back), ``render``.
"""
