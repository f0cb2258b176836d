"""Coverage-guided fuzz targets (atheris) and their bounded runs for the test suite.

Each ``*_target`` module exposes ``one_input(data: bytes)``, which raises ``AssertionError`` (or
any unexpected exception) on a finding and returns normally otherwise, and ``seeds()``, a small
corpus of interesting inputs. ``python -m tests.fuzz.run`` drives them with atheris (``make
fuzz``); ``test_fuzz_targets.py`` runs each over its seeds and mutations of them in seconds.
"""
