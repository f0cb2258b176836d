"""`make help` lists every Makefile target that has a `## name: text` block, one line each with
the block's continuation lines joined."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
MAKEFILE = REPO_ROOT / "Makefile"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_help_lists_every_documented_target() -> None:
    done = subprocess.run(
        ["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = {line.split(maxsplit=1)[0]: line for line in done.stdout.splitlines() if line}
    documented = re.findall(r"^## ([A-Za-z0-9_-]+):", MAKEFILE.read_text(), flags=re.MULTILINE)
    assert documented, "no `## name:` blocks in the Makefile"
    missing = [name for name in documented if name not in listed]
    assert not missing, f"targets missing from `make help`: {missing}\n{done.stdout}"
    # setup-demo's block runs over three lines: its last one is on the same output line.
    assert "setup-demo" in listed and "(tools/local-fs)" in listed["setup-demo"]
    assert "help" in listed
