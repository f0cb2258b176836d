"""The wheel as a user installs it: built from the repository with ``pip wheel --no-deps``,
installed into a fresh virtualenv that has PySpark and the other dependencies but not the
project, where it must hold only the product, declare requirements the installed versions meet,
import from its own site-packages, and give Spark ``format("mqtt")`` without any registration.
Without delta-spark's package (the ``[delta]`` extra) the ingest job says how to install it.
"""

from __future__ import annotations

import email
import subprocess
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.brokers import MosquittoBroker
from tests.support.ids import unique_id
from tests.support.publishing import numbered, queue_for_session
from tests.support.spark_processes import DIST_NAME, FreshVenv, build_wheel, clean_env, source_files

PRODUCT = ("connector", "streaming_jobs", "pyspark_mqtt.py")
"""The wheel's top-level entries besides its ``.dist-info``."""
READ_TIMEOUT = 180.0
"""The fresh virtualenv's Spark: a local session, one ``AvailableNow`` run, its stop."""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> FreshVenv:
    """A fresh virtualenv with the wheel installed (no dependencies: PySpark, pyarrow and
    delta-spark come from the project virtualenv through a ``.pth`` line)."""
    return FreshVenv.create(tmp_path_factory.mktemp("installed") / "venv", [wheel])


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_holds_every_product_module_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if ".dist-info/" not in n]
    assert {n.split("/", 1)[0] for n in names} == set(PRODUCT), names
    product = sorted(n for n in source_files() if n.split("/", 1)[0] in PRODUCT)
    assert sorted(names) == product
    # The demo and the local broker are developer tools (devtools/), run from a checkout.
    assert not [n for n in names if "demo" in n or "local_broker" in n], names


def test_the_wheel_requires_ranges_and_delta_only_in_its_extra(wheel: Path) -> None:
    requirements = [Requirement(r) for r in wheel_metadata(wheel).get_all("Requires-Dist", [])]
    plain = {r.name: r for r in requirements if r.marker is None}
    assert set(plain) == {"pyspark", "pyarrow", "wsproto", "protobuf"}, requirements
    for requirement in plain.values():
        assert all(spec.operator in (">=", "<") for spec in requirement.specifier), requirement
    assert str(plain["pyspark"].specifier) == "<5,>=4.2.0"
    delta = [r for r in requirements if r.name == "delta-spark"]
    assert delta and all(r.marker is not None for r in delta), delta
    assert any(r.marker.evaluate({"extra": "delta"}) for r in delta if r.marker), delta


def test_the_installed_wheel_imports_from_its_own_site_packages(venv: FreshVenv) -> None:
    files = venv.run_script(
        """
        import json, connector, streaming_jobs, pyspark_mqtt
        print(json.dumps([m.__file__ for m in (connector, streaming_jobs, pyspark_mqtt)]))
        """
    )
    for file in files:
        assert Path(file).is_relative_to(venv.site_packages), files
    assert venv.unmet_requirements(DIST_NAME, extras=["delta"]) == []


SPARK_READ = """
import json, sys
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

broker, topic, client_id, wal, checkpoint, timeout = sys.argv[1:]
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
frame = (
    spark.readStream.format("mqtt")
    .option("brokerUrl", broker)
    .option("topic", topic)
    .option("clientId", client_id)
    .option("walPath", wal)
    .option("availableNowIdleTimeout", "0.5")
    .load()
)
query = (
    frame.writeStream.format("memory")
    .queryName("landed")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
ended = query.awaitTermination(float(timeout))
if not ended:
    query.stop()
from connector.spark.schema import SCHEMA_DDL
import connector
landed = spark.sql("SELECT payload FROM landed").collect()
print(json.dumps({
    "ended": ended,
    "error": None if query.exception() is None else str(query.exception()),
    "columns": frame.columns,
    "expected_columns": StructType.fromDDL(SCHEMA_DDL).fieldNames(),
    "payloads": [bytes(r.payload).decode() for r in landed],
    "connector": connector.__file__,
}))
spark.stop()
"""


@pytest.mark.spark
def test_spark_in_the_fresh_virtualenv_finds_format_mqtt_by_itself(
    venv: FreshVenv, mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    topic, client_id = f"wheel/{unique_id('t-')}", unique_id("wheel-")
    messages = numbered(topic, 5, qos=1)
    queue_for_session(mosquitto, client_id, topic, 1, messages)
    result = venv.run_script(
        SPARK_READ,
        mosquitto.url, topic, client_id, str(tmp_path / "wal"), str(tmp_path / "checkpoint"),
        str(READ_TIMEOUT),
        timeout=READ_TIMEOUT + 60,
        PYSPARK_PYTHON=str(venv.python),
        PYSPARK_SUBMIT_ARGS="--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell",
    )  # fmt: skip
    assert result["ended"] and result["error"] is None, result
    assert result["columns"] == result["expected_columns"], result
    assert sorted(result["payloads"]) == sorted(m.payload.decode() for m in messages), result
    assert Path(result["connector"]).is_relative_to(venv.site_packages), result


def test_the_ingest_job_without_an_extra_says_how_to_install_it(
    wheel: Path, tmp_path: Path
) -> None:
    """Without the ``[delta]`` extra's package the job says how to install it; with
    ``--metrics-port`` and without the ``[metrics]`` extra's, that one."""
    bare = FreshVenv.create(
        tmp_path / "venv",
        [wheel],
        without=("delta", "delta_spark-*", "prometheus_client", "prometheus_client-*"),
    )
    for extra, install in (
        ([], "pip install 'mqtt-lakehouse-connector[delta]'"),
        (["--metrics-port", "0"], "pip install 'mqtt-lakehouse-connector[delta,metrics]'"),
    ):
        done = subprocess.run(
            [str(bare.python), "-m", "streaming_jobs.ingest", "--broker", "tcp://127.0.0.1:1883",
             "--topic", "t", "--table", str(tmp_path / "table"),
             "--checkpoint", str(tmp_path / "checkpoint"), *extra],
            cwd=bare.root, capture_output=True, text=True, timeout=120, env=clean_env(),
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 1, done
        assert install in done.stderr, done
        assert not (tmp_path / "checkpoint").exists(), "the job went on without the package"
