"""The pre-commit configuration is valid and runs the checks CONTRIBUTING.md names: ruff (the
rules and the format), mypy and the fast subset of the unit tests, all on the virtualenv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFIG = REPO_ROOT / ".pre-commit-config.yaml"


def test_the_configuration_is_valid_and_names_the_checks() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = CONFIG.read_text()
    for entry in ("-m ruff check", "-m ruff format --check", "-m mypy", "-m pytest"):
        assert f".venv/bin/python {entry}" in text, entry
    assert "language: system" in text and "repo: local" in text  # nothing downloaded
