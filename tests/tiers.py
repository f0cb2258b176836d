"""The whole suite in two tiers at once (`make test`): ``python -m tests.tiers [PYTEST_ARGS]``.

The serial tier (:data:`SERIAL_DIRS`) runs its tests one after another in one pytest process:
they share the run's one Spark session, start Spark applications, a fixed Spark Connect port or
fault timings that two at once would disturb. The broker tier (every other directory under
``tests/``: unit, fuzz, integration, interop, the ingest job's subprocess tests of
:data:`BESIDE`, and the test directories outside ``tests/`` of :data:`OUTSIDE`) keeps its
brokers, ports and directories private, so it runs beside it in a second process. Both print
their 25 slowest tests; the broker tier's output streams, the serial tier's follows it. The
exit status is the first non-zero of the two.

The local Spark driver JVMs of both tiers map their classes from one class-data archive
(:mod:`devtools.class_archive`). ``make test`` builds it beside the rest of the set-up; run
directly, the tiers build it beside their first minutes when this checkout has none for its JDK
and jars yet, and JVMs started before it is there start without it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from devtools import class_archive

log = logging.getLogger(__name__)

TESTS_DIR = Path(__file__).resolve().parent
SERIAL_DIRS = ("chaos", "cluster", "connect", "packaging", "pipelines", "spark")
"""The directories whose tests run one after another, in one process."""
BESIDE = ("spark/test_crash_recovery.py", "spark/test_job_*.py")
"""Modules of those directories that run in the broker tier's process instead, to even out the
tiers' times: each runs the ingest job (its own Spark application) as a subprocess, with its
own broker, ports and directories, and reads the tables back in its tier's own session."""
OUTSIDE = ("bench/tests",)
"""Test directories outside ``tests/``, relative to the repository (a package's own tests, which
need neither a broker nor Spark): they run in the broker tier."""
DURATIONS = "--durations=25"


def dirs_with_tests() -> list[str]:
    """Every directory under tests/ that holds test modules, by name."""
    return sorted(
        d.name
        for d in TESTS_DIR.iterdir()
        if d.is_dir() and not d.name.startswith((".", "_")) and any(d.rglob("test_*.py"))
    )


def tiers() -> tuple[list[str], list[str]]:
    """(serial, broker) test paths, relative to the repository: together every test module,
    each once."""
    beside = sorted({path for pattern in BESIDE for path in TESTS_DIR.glob(pattern)})
    serial: list[str] = []
    for name in SERIAL_DIRS:
        folder = TESTS_DIR / name
        if any(path.parent == folder for path in beside):
            serial += [_relative(p) for p in sorted(folder.glob("test_*.py")) if p not in beside]
        else:
            serial.append(_relative(folder))
    broker = [f"tests/{name}" for name in dirs_with_tests() if name not in SERIAL_DIRS]
    return serial, broker + [_relative(p) for p in beside] + list(OUTSIDE)


def _relative(path: Path) -> str:
    return str(path.relative_to(TESTS_DIR.parent))


def with_class_archive() -> threading.Thread | None:
    """Point this process's environment (the tiers inherit it) at the class-data archive, and
    build it in the background when it is not there yet; the builder, if one runs."""
    try:
        path = class_archive.archive_path()
    except Exception as exc:  # no JDK or no PySpark: the Spark tests will say so themselves
        log.warning("no class-data archive: %s", exc)
        return None
    os.environ[class_archive.OPTS_ENV] = class_archive.submit_opts(
        path, os.environ.get(class_archive.OPTS_ENV)
    )
    if path.is_file():
        return None

    def build() -> None:
        try:
            class_archive.build(path)
        except Exception as exc:  # the tests run as well without it, a little slower
            log.warning("the class-data archive was not built: %s", exc)

    builder = threading.Thread(target=build, name="class-archive", daemon=True)
    builder.start()
    return builder


def main(extra: Sequence[str]) -> int:
    serial, broker = tiers()
    command = [sys.executable, "-m", "pytest", "-q", DURATIONS, *extra]
    builder = with_class_archive()
    with tempfile.TemporaryFile() as serial_out:
        behind = subprocess.Popen([*command, *serial], stdout=serial_out, stderr=subprocess.STDOUT)
        try:
            print(f"tier 1 of 2 (beside tier 2): {' '.join(broker)}", flush=True)
            front = subprocess.run([*command, *broker], check=False).returncode
        finally:
            rest = behind.wait()
            if builder is not None:
                builder.join()
        serial_out.seek(0)
        print(f"\ntier 2 of 2 (serial): {' '.join(serial)}", flush=True)
        sys.stdout.buffer.write(serial_out.read())
        sys.stdout.flush()
    return front or rest


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main(sys.argv[1:]))
