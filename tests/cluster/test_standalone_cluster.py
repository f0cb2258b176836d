"""The ingest job on a Spark standalone cluster: a master and a worker, each its own JVM, with
``spark-submit --master spark://...`` in client mode, as a user runs it.

The job's Python is a fresh virtualenv with the wheel installed (``[delta]`` included), the same
path on the driver and the worker as a cluster's image gives it, named by ``PYSPARK_PYTHON``:
Spark runs a Python data source's code, the partition reads on the executors included, with the
Python the driver JVM's environment names (``tests/support/spark_processes.py``). The driver
runs the installed job's script in a working directory of its own, the executor in the worker's
directory; Delta's jars reach the executor through ``--jars``. Messages of QoS 1 and QoS 2 are
queued for the job's session at a real Mosquitto; an ``AvailableNow`` run drains them, and every
one must be in the Delta table exactly once, with records reaching the tasks inside their
partitions (``inline``, the default off local mode) and read from the WAL files (``wal``: the
driver's WAL path is visible to the executor on this one machine). A Python without the
connector cannot run the job, even with the wheel shipped by ``--py-files``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.delta_log import DeltaSnapshot
from streaming_jobs.spark_session import delta_jars
from tests.support.brokers import MosquittoBroker
from tests.support.ids import unique_id
from tests.support.publishing import Message, numbered, queue_for_session
from tests.support.spark_processes import (
    SPARK_SUBMIT,
    FreshVenv,
    SparkProcess,
    StandaloneCluster,
    build_wheel,
)
from tests.support.spark_streams import assert_exactly_once

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

TOPIC_FILTER = "cluster/+/reading"
PER_QOS = 150
RUN_TIMEOUT = 420.0
"""One ``AvailableNow`` run on the cluster: the driver's JVM and Python, an executor, the
source's drain and one or two micro-batches, on a busy two-core machine."""
APP_ID = re.compile(r"Connected to Spark cluster with app ID (app-[\w-]+)")
STARTS = "python-starts.log"
"""Written by a virtualenv's Python at each start (a ``.pth`` line): its working directory."""
NOT_FOUND = "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: mqtt"


@dataclass(frozen=True)
class Node:
    """A Python environment at the same path on every machine of the cluster."""

    venv: FreshVenv

    @classmethod
    def create(cls, root: Path, wheels: list[Path]) -> Node:
        venv = FreshVenv.create(root, wheels)
        starts = venv.root / STARTS
        (venv.site_packages / "start-log.pth").write_text(
            f"import os; open({str(starts)!r}, 'a').write(os.getcwd() + '\\n')\n"
        )
        return cls(venv)

    def started_in(self) -> list[Path]:
        """Working directories of the Python processes this environment started."""
        path = self.venv.root / STARTS
        return [Path(line) for line in path.read_text().splitlines()] if path.exists() else []

    def connector_file(self) -> str | None:
        """Where this environment's Python imports ``connector`` from (None: it cannot)."""
        found: str | None = self.venv.run_script(
            """
            import importlib.util, json
            spec = importlib.util.find_spec("connector")
            print(json.dumps(spec and spec.origin))
            """
        )
        return found


@dataclass(frozen=True)
class Deployment:
    wheel: Path
    installed: Node
    """The wheel installed with its ``[delta]`` extra's package (seen through the ``.pth``)."""
    bare: Node
    """PySpark, pyarrow and delta-spark, no connector."""

    def script(self) -> Path:
        """The ingest job's script as the wheel installed it."""
        return self.installed.venv.site_packages / "streaming_jobs" / "ingest.py"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    base = tmp_path_factory.mktemp("deployment")
    wheel = build_wheel(base / "wheel")
    return Deployment(
        wheel, Node.create(base / "installed", [wheel]), Node.create(base / "bare", [])
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


@dataclass
class Run:
    """One ``spark-submit`` of the ingest job, finished."""

    code: int
    log: str
    app_dir: Path | None


def submit(
    cluster: StandaloneCluster,
    script: Path,
    python: Path,
    job_args: list[str],
    workdir: Path,
    extra: tuple[str, ...] = (),
) -> Run:
    """Run the job on ``cluster`` with ``python`` as ``PYSPARK_PYTHON`` in a working directory
    of its own, Delta's jars for every JVM and small settings for a one-core executor; wait
    until it exits."""
    jars = delta_jars()
    assert jars, "no Delta jars in .jars/: run `make setup`"
    settings = {
        "spark.executor.memory": "512m",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.ui.enabled": "false",
    }
    conf = [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]
    command = [
        str(SPARK_SUBMIT), "--master", cluster.url, "--deploy-mode", "client",
        "--jars", ",".join(jars), "--driver-java-options", "-XX:TieredStopAtLevel=1",
        *conf, *extra, str(script), *job_args,
    ]  # fmt: skip
    cwd = workdir / "driver-cwd"
    cwd.mkdir()
    job = SparkProcess.start(
        "ingest", command, workdir, cwd=cwd, env={"PYSPARK_PYTHON": str(python)}
    )
    try:
        code = job.wait(RUN_TIMEOUT)
    finally:
        job.stop()
    text = job.log_path.read_text(errors="replace")
    app = APP_ID.search(text)
    return Run(code, f"{job.logs()}\n{cluster.logs()}", cluster.work_dir / app[1] if app else None)


def messages() -> list[Message]:
    """QoS 1 and QoS 2 messages on two topics the filter matches, distinct payloads."""
    return numbered("cluster/q1/reading", PER_QOS, qos=1, tag="q1") + numbered(
        "cluster/q2/reading", PER_QOS, qos=2, tag="q2"
    )


def job_args(broker: MosquittoBroker, client_id: str, base: Path, partition_data: str) -> list[str]:
    return [
        "--broker", broker.url, "--topic", TOPIC_FILTER, "--qos", "2", "--client-id", client_id,
        "--table", str(base / "table"), "--checkpoint", str(base / "checkpoint"),
        "--trigger", "available-now", "--partition-data", partition_data,
    ]  # fmt: skip


@pytest.mark.parametrize("partition_data", ["inline", "wal"])
def test_the_ingest_job_on_a_standalone_cluster_lands_every_message_once(
    cluster: StandaloneCluster,
    deployment: Deployment,
    mosquitto: MosquittoBroker,
    tmp_path: Path,
    partition_data: str,
) -> None:
    node = deployment.installed
    found = node.connector_file()
    assert found and Path(found).is_relative_to(node.venv.site_packages), found
    client_id = unique_id("cluster-")
    batch = messages()
    queue_for_session(mosquitto, client_id, TOPIC_FILTER, 2, batch)

    args = job_args(mosquitto, client_id, tmp_path, partition_data)
    run = submit(cluster, deployment.script(), node.venv.python, args, tmp_path)
    assert run.code == 0, run.log
    assert run.app_dir is not None, f"the job did not run on the cluster:\n{run.log}"
    started = node.started_in()
    assert any(d.is_relative_to(run.app_dir) for d in started), f"no executor Python: {started}"

    rows = DeltaSnapshot.load(tmp_path / "table").read().to_pylist()
    assert_exactly_once(rows, batch)
    qos = {m.payload: m.qos for m in batch}
    assert all(row["qos"] == qos[bytes(row["payload"])] for row in rows), rows[:5]


def test_a_python_without_the_connector_cannot_run_the_job_even_with_py_files(
    cluster: StandaloneCluster, deployment: Deployment, mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    assert deployment.bare.connector_file() is None
    args = job_args(mosquitto, unique_id("cluster-"), tmp_path, "inline")
    extra = ("--py-files", str(deployment.wheel))
    run = submit(cluster, deployment.script(), deployment.bare.venv.python, args, tmp_path, extra)
    assert run.code == 1, run.log
    assert NOT_FOUND in run.log, run.log
