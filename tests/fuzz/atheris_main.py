"""Run one fuzz target under atheris: ``python -m tests.fuzz.atheris_main TARGET [libFuzzer
flags and corpus directories]``. The connector's modules are instrumented for coverage."""

from __future__ import annotations

import importlib
import logging
import sys

import atheris


def main() -> None:
    target = sys.argv[1]
    logging.disable(logging.WARNING)  # recovery warns on every damaged WAL: millions of lines
    with atheris.instrument_imports(include=["connector"]):
        module = importlib.import_module(f"tests.fuzz.{target}_target")
    atheris.Setup([sys.argv[0], *sys.argv[2:]], module.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
