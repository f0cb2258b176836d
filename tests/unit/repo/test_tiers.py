"""`make test`'s two tiers (tests/tiers.py) run every test directory, each once."""

from __future__ import annotations

from tests.tiers import SERIAL_DIRS, TESTS_DIR, dirs_with_tests, tiers


def test_the_two_tiers_cover_every_test_directory_once() -> None:
    serial, broker = tiers()
    assert not set(serial) & set(broker)
    assert sorted(serial + broker) == [f"tests/{name}" for name in dirs_with_tests()]
    for name in ("unit", "integration", "spark", "chaos"):
        assert name in dirs_with_tests()
    assert all((TESTS_DIR / name).is_dir() for name in SERIAL_DIRS)
