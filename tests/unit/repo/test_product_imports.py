"""The wheel's modules (``connector``, ``streaming_jobs``, ``pyspark_mqtt``) never import the
repository's developer tools, tests or benchmarks, which the wheel does not ship."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("connector", "streaming_jobs", "pyspark_mqtt.py")
NOT_SHIPPED = frozenset({"devtools", "tests", "bench"})


def imported_top_levels(path: Path) -> set[str]:
    """The top-level packages ``path`` imports (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def product_files() -> list[Path]:
    files: list[Path] = []
    for entry in PRODUCT:
        path = REPO_ROOT / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def test_the_wheels_modules_import_nothing_it_does_not_ship() -> None:
    files = product_files()
    assert any(f.name == "ingest.py" for f in files), files
    offending = {
        str(f.relative_to(REPO_ROOT)): sorted(imported_top_levels(f) & NOT_SHIPPED) for f in files
    }
    assert {f: found for f, found in offending.items() if found} == {}


def test_imports_of_developer_tools_are_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom devtools.mosquitto import MosquittoBroker\n"
        "def f():\n    import tests.support.waiting\n    from . import sibling\n"
    )
    assert imported_top_levels(module) == {"os", "devtools", "tests"}
