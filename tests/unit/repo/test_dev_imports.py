"""The developer tools, the tests and the benchmarks import one way (CONTRIBUTING.md, "Layout"):
``devtools`` imports neither ``tests`` nor ``bench``; ``bench`` (its own tests in
``bench/tests`` included) never imports ``tests``, and ``tests`` never imports ``bench``. What
both need lives in ``devtools``."""

from __future__ import annotations

from pathlib import Path

from tests.unit.repo.test_product_imports import imported_top_levels

REPO_ROOT = Path(__file__).resolve().parents[3]


def offending(directory: str, forbidden: set[str]) -> dict[str, list]:
    """The modules under ``directory`` that import a package of ``forbidden``, with what they
    import of it."""
    found = {}
    for path in sorted((REPO_ROOT / directory).rglob("*.py")):
        imported = sorted(imported_top_levels(path) & forbidden)
        if imported:
            found[str(path.relative_to(REPO_ROOT))] = imported
    return found


def test_the_developer_tools_import_neither_tests_nor_benchmarks() -> None:
    assert offending("devtools", {"tests", "bench"}) == {}


def test_the_benchmarks_never_import_the_tests() -> None:
    assert offending("bench", {"tests"}) == {}


def test_the_tests_never_import_the_benchmarks() -> None:
    assert offending("tests", {"bench"}) == {}


def test_the_check_finds_an_import() -> None:
    """``bench/tests`` imports ``bench``: the check sees it."""
    assert "bench" in str(offending("bench/tests", {"bench"}))
