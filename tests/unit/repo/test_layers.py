"""The import rules of the product (CONTRIBUTING.md, docs/architecture.md): layers import one
way, ``connector.mqtt``, ``connector.wal`` and ``connector.sparkplug`` (the three lowest,
knowing nothing of each other) below ``connector.options``, below ``connector.receiver``, below
``connector.spark``, below ``connector.source`` (the names a user imports), below
``streaming_jobs``; the receiver imports neither PySpark nor pyarrow; the Spark reader and
writer import each other never and share only the schema and the one-line errors of
``connector.spark`` (and the options below); ``connector.mqtt.errors`` is a leaf; and no module
of ``connector`` is in an import cycle.
Every import counts, those inside functions too; only those under ``if TYPE_CHECKING:``
(annotations, never run) do not."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("connector", "streaming_jobs")

_ABOVE_SPARK = ("connector.source", "streaming_jobs")
_ABOVE_RECEIVER = ("connector.spark", *_ABOVE_SPARK)
_ABOVE = ("connector.options", "connector.receiver", *_ABOVE_RECEIVER)
FORBIDDEN = {
    "connector.mqtt": ("connector.wal", "connector.sparkplug", *_ABOVE),
    "connector.wal": ("connector.mqtt", "connector.sparkplug", *_ABOVE),
    "connector.sparkplug": ("connector.mqtt", "connector.wal", *_ABOVE),
    "connector.options": ("connector.receiver", *_ABOVE_RECEIVER),
    "connector.receiver": _ABOVE_RECEIVER,
    "connector.spark.reader": ("connector.spark.writer", "connector.spark.datasource"),
    "connector.spark.writer": (
        "connector.spark.reader",
        "connector.spark.datasource",
        "connector.receiver",
    ),
    "connector.spark": _ABOVE_SPARK,
    "connector.source": ("streaming_jobs",),
}
"""Layer -> what it must not import."""
SPARK_FREE = ("connector.mqtt", "connector.wal", "connector.options", "connector.receiver")
"""Layers that never import PySpark, and pyarrow only inside the functions of a WAL on shared
storage (``pyarrow.fs``): a shard process runs on them alone."""
SHARED_BY_READER_AND_WRITER = {"connector.spark.schema", "connector.spark.user_errors"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _runtime_nodes_of(child))
            continue
        yield node
        yield from _runtime_nodes(node)


def _runtime_nodes_of(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    yield from _runtime_nodes(node)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports at run time."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
                break
    return found


def outside_imports(path: Path, *, module_level: bool = False) -> set[str]:
    """The top-level names of the absolute imports of ``path`` at run time (only the module's
    own statements' with ``module_level``)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if module_level else _runtime_nodes(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_layers_import_one_way() -> None:
    edges = graph()
    assert "connector.mqtt.session" in edges and "streaming_jobs.ingest" in edges
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in edges.items()
        for layer, forbidden in FORBIDDEN.items()
        if _in(module, layer)
        for target in targets
        if any(_in(target, f) for f in forbidden)
    )
    assert wrong == []


def test_the_receiver_and_what_it_stands_on_import_no_spark() -> None:
    known = modules()
    spark_free = [m for m in known if any(_in(m, layer) for layer in SPARK_FREE)]
    assert "connector.receiver.shard_worker" in spark_free
    wrong = sorted(
        f"{module} imports {name}"
        for module in spark_free
        for name in (outside_imports(known[module]) & {"pyspark"})
        | (outside_imports(known[module], module_level=True) & {"pyarrow"})
    )
    assert wrong == []


def test_the_reader_and_the_writer_share_only_the_schema_and_errors() -> None:
    edges = graph()

    def spark_modules_imported_by(room: str) -> set[str]:
        return {
            target
            for module, targets in edges.items()
            if _in(module, room)
            for target in targets
            if _in(target, "connector.spark") and not _in(target, room)
        }

    reader = spark_modules_imported_by("connector.spark.reader")
    writer = spark_modules_imported_by("connector.spark.writer")
    assert "connector.spark.user_errors" in reader & writer
    assert reader & writer <= SHARED_BY_READER_AND_WRITER


def test_no_import_cycle_in_connector() -> None:
    edges = {m: t for m, t in graph().items() if _in(m, "connector")}
    assert cycles(edges) == []


def test_the_mqtt_errors_are_a_leaf() -> None:
    assert graph()["connector.mqtt.errors"] == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a two-module loop and a longer one are found."""
    found = cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}})
    assert found == [["a", "b"], ["c", "d", "e"]]


def test_type_checking_imports_do_not_count(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n    from . import c\n"
        "def f():\n    from . import d\n"
    )
    known = {name: source for name in ("p", "p.x", "p.b", "p.c", "p.d")}
    assert imports_of("p.x", source, known) == {"p.b", "p.d"}
