"""The README's quick start runs as written: its script, from a plain ``.venv/bin/python`` (the
virtualenv not activated, no ``PYSPARK_PYTHON``, ``python3`` on ``PATH`` another Python), lands
every message published from the moment its ``create_session`` returned, exactly once at QoS 2.

Only the broker's address and the script's directory are swapped for the test's own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from connector.receiver.broker_session import SUBSCRIPTIONS_FILE
from devtools.delta_log import delta_row_count
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import SUBMIT_ARGS
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import LAND_TIMEOUT, assert_exactly_once
from tests.support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Reading MQTT: the quick start"
COUNT = 200


def quickstart_script() -> str:
    """The first Python block under the README's quick-start heading."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index(HEADING) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no Python block under the quick-start heading"
    return match.group(1)


def plain_environment(tmp_path: Path) -> dict[str, str]:
    """A user's shell: no virtualenv activated, no PySpark settings, and ``python3`` on
    ``PATH`` a Python without the connector."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    other = bin_dir / "python3"
    other.write_text('#!/bin/sh\nexec /usr/bin/env -i /usr/bin/python3 -I "$@"\n')
    other.chmod(0o755)
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    drop = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # The JVM's JIT limited to C1 only to start faster; nothing the script relies on.
    return {
        **env,
        "PATH": os.pathsep.join([str(bin_dir), *path]),
        "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS,
    }


def test_the_readme_quickstart_runs_as_written(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    script = quickstart_script()
    assert "tcp://localhost:1883" in script and "/tmp/quickstart" in script
    base = tmp_path / "quickstart"
    script = script.replace("tcp://localhost:1883", broker.url).replace(
        "/tmp/quickstart", str(base)
    )
    (tmp_path / "quickstart.py").write_text(script)
    out = (tmp_path / "quickstart.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "quickstart.py")],
        cwd=REPO_ROOT,
        env=plain_environment(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def alive(condition: bool) -> bool:
        code = proc.poll()
        assert code is None, (
            f"the script exited {code}:\n{(tmp_path / 'quickstart.log').read_text()}"
        )
        return condition

    try:
        wait_until(
            lambda: alive((base / "mqtt-wal" / SUBSCRIPTIONS_FILE).exists()),
            120,
            message="create_session did not return",
        )
        messages = numbered("plant/a/telemetry", COUNT, qos=2)
        publish(broker, messages)
        table = base / "telemetry"
        wait_until(
            lambda: alive(delta_row_count(table) >= COUNT),
            LAND_TIMEOUT,
            message=lambda: f"{table} holds {delta_row_count(table)} rows of {COUNT}",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        out.close()
    assert_exactly_once(spark.read.format("delta").load(str(table)).collect(), messages)
