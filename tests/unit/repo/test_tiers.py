"""`make test`'s two tiers (tests/tiers.py) run every test directory, each once."""

from __future__ import annotations

from pathlib import Path

from tests.tiers import BESIDE, OUTSIDE, SERIAL_DIRS, TESTS_DIR, dirs_with_tests, tiers


def modules(paths: list[str]) -> list[Path]:
    """The test modules under ``paths`` (folders or files)."""
    found: list[Path] = []
    for path in (TESTS_DIR.parent / p for p in paths):
        found += sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
    return found


def test_the_two_tiers_run_every_test_module_once() -> None:
    serial, broker = tiers()
    both = modules(serial) + modules(broker)
    assert len(both) == len(set(both))
    outside = [p for d in OUTSIDE for p in (TESTS_DIR.parent / d).rglob("test_*.py")]
    assert outside and set(outside) <= set(modules(broker)), "OUTSIDE runs in the broker tier"
    assert sorted(both) == sorted([*TESTS_DIR.rglob("test_*.py"), *outside])
    for name in ("unit", "integration", "spark", "chaos"):
        assert name in dirs_with_tests()
    assert all((TESTS_DIR / name).is_dir() for name in SERIAL_DIRS)
    moved = {p for pattern in BESIDE for p in TESTS_DIR.glob(pattern)}
    assert moved and moved <= set(modules(broker)), "BESIDE names modules that exist"


def test_the_class_archive_goes_after_the_callers_own_submit_options() -> None:
    from devtools.class_archive import QUIET, submit_opts

    archive = Path("/x/spark.jsa")
    assert submit_opts(archive).split() == [f"-XX:SharedArchiveFile={archive}", *QUIET]
    given = "-Dfoo=1 -Xmx1g"
    assert submit_opts(archive, given).split()[:2] == given.split()
