"""The developer tools, the tests and the benchmarks import one way (CONTRIBUTING.md, "Layout"):
``devtools`` imports neither ``tests`` nor ``bench``; ``bench`` never imports ``tests``; and
``tests`` imports ``bench`` only in the benchmarks' own unit tests (``tests/unit/bench``). What
both need lives in ``devtools``."""

from __future__ import annotations

from pathlib import Path

from tests.unit.repo.test_product_imports import imported_top_levels

REPO_ROOT = Path(__file__).resolve().parents[3]
BENCH_UNIT_TESTS = REPO_ROOT / "tests" / "unit" / "bench"


def offending(directory: str, forbidden: set[str], exempt: Path | None = None) -> dict[str, list]:
    """The modules under ``directory`` (but ``exempt``) that import a package of ``forbidden``,
    with what they import of it."""
    found = {}
    for path in sorted((REPO_ROOT / directory).rglob("*.py")):
        if exempt is not None and exempt in path.parents:
            continue
        imported = sorted(imported_top_levels(path) & forbidden)
        if imported:
            found[str(path.relative_to(REPO_ROOT))] = imported
    return found


def test_the_developer_tools_import_neither_tests_nor_benchmarks() -> None:
    assert offending("devtools", {"tests", "bench"}) == {}


def test_the_benchmarks_never_import_the_tests() -> None:
    assert offending("bench", {"tests"}) == {}


def test_the_tests_import_the_benchmarks_only_in_their_unit_tests() -> None:
    assert BENCH_UNIT_TESTS.is_dir()
    assert offending("tests", {"bench"}, exempt=BENCH_UNIT_TESTS) == {}
