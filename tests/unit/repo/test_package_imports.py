"""A receiver process imports what it runs: ``connector.source`` loads the data source (PySpark,
pyarrow) only when a caller asks for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def modules_after(statement: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after ``statement``."""
    names = "' '.join(sorted({m.split('.')[0] for m in sys.modules}))"
    probe = f"{statement}; import sys; print({names})"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_receiver_process_does_not_import_pyspark_or_pyarrow() -> None:
    loaded = modules_after("import connector.receiver.shard_worker")
    assert "connector" in loaded
    # google: protobuf, which the Sparkplug host role imports with its first message
    assert not loaded & {"pyspark", "pyarrow", "numpy", "pandas", "google"}


def test_the_package_names_still_import_the_data_source() -> None:
    loaded = modules_after(
        "from connector.source import DataLossError, InvalidOptionError, MqttDataSource, "
        "SourceOptions; assert MqttDataSource.name() == 'mqtt'"
    )
    assert {"pyspark", "pyarrow"} <= loaded
