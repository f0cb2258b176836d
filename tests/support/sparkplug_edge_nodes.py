"""The Sparkplug edge nodes of others the tests run (Eclipse Tahu's JavaScript client, installed
by ``make setup`` into tools/sparkplug-edge): their command lines, or a skip saying what is
missing."""

from __future__ import annotations

import pytest

from devtools import REPO_ROOT
from devtools.system_tools import which

JS_DIR = REPO_ROOT / "tools" / "sparkplug-edge"
BIN_DIRS = ("/usr/bin", "/usr/local/bin")


def js_edge_node(script: str) -> list[str]:
    """``node tools/sparkplug-edge/<script>``; skips when Node or sparkplug-client is missing."""
    node_bin = which("node", BIN_DIRS)
    if node_bin is None:
        pytest.skip("the Tahu JavaScript edge node needs Node.js, and no `node` was found")
    if not (JS_DIR / "node_modules" / "sparkplug-client" / "package.json").is_file():
        pytest.skip(f"sparkplug-client is not installed in {JS_DIR}: run `make setup`")
    return [node_bin, str(JS_DIR / script)]
