"""Benchmarks for the MQTT client: ``python -m bench.codec`` and ``python -m bench.drain``.

Each benchmark measures the project against peers in the same run and reports ratios, so the
noise of a shared machine mostly cancels. Results go to ``bench/results/<name>.json``.
"""
