"""How much a directory tree holds on disk, for tests and benchmarks that watch stores grow."""

from __future__ import annotations

import os
from pathlib import Path


def tree_size(path: Path, suffix: str = "") -> tuple[int, int]:
    """(files, bytes) under ``path`` whose names end with ``suffix``; files that go while the
    tree is walked are not counted."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            if name.endswith(suffix):
                try:
                    size += os.stat(os.path.join(root, name)).st_size
                except FileNotFoundError:
                    continue
                files += 1
    return files, size
