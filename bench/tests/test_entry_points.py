"""Every benchmark's command line parses, and every module `make bench` runs exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bench.common import REPO_ROOT

MODULES = sorted(
    p.stem for p in Path(__file__).resolve().parents[1].glob("*.py") if "def main(" in p.read_text()
)


@pytest.mark.parametrize("name", MODULES)
def test_help_parses(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(f"bench.{name}").main(["--help"])
    assert exit_.value.code == 0
    assert f"python -m bench.{name}" in capsys.readouterr().out


def test_the_makefile_runs_existing_benchmarks() -> None:
    named = set(re.findall(r"-m bench\.(\w+)", (REPO_ROOT / "Makefile").read_text()))
    assert {"codec", "ingest", "report", "chaos_soak"} <= named
    assert named <= set(MODULES), named - set(MODULES)
