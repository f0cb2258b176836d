"""Settings ``streaming_jobs.spark_session`` adds to the sessions and submissions it makes.

Rules under test: a driver JVM that runs the tasks itself (a ``local`` master) gets the
spawn-free local file system when its jar was built, merged with the caller's own class path
and never over the caller's own file system settings, plus G1 settings placed before the
caller's own driver Java options (the JVM takes a flag's last value); any other master gets
none of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark import SparkConf

from streaming_jobs import spark_session
from streaming_jobs.spark_session import (
    DRIVER_GC_OPTIONS,
    JAVA_OPTIONS,
    LOCAL_FS_CLASSES,
    resubmit_command,
    with_driver_gc,
    with_local_driver,
    with_local_fs,
)

FILE_IMPL = "spark.hadoop.fs.file.impl"
CLASS_PATH = "spark.driver.extraClassPath"


@pytest.fixture
def jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    built = tmp_path / "spawn-free-local-fs.jar"
    built.write_bytes(b"PK")
    monkeypatch.setenv("LOCAL_FS_JAR", str(built))
    monkeypatch.setattr(spark_session, "delta_jars", lambda: ["/jars/delta-spark.jar"])
    return built


def _conf(**settings: str) -> SparkConf:
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key.replace("__", "."), value)
    return conf


def _confs(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, word in enumerate(command) if word == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_a_local_session_gets_the_file_system(jar: Path) -> None:
    merged = with_local_fs({"spark.sql.shuffle.partitions": "2"})
    assert merged == {
        "spark.sql.shuffle.partitions": "2",
        **LOCAL_FS_CLASSES,
        CLASS_PATH: str(jar),
    }


def test_without_the_jar_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_FS_JAR", str(tmp_path / "not-built.jar"))
    assert with_local_fs({"a": "b"}) == {"a": "b"}


def test_the_callers_settings_win_and_class_paths_merge(jar: Path) -> None:
    merged = with_local_fs({FILE_IMPL: "org.example.Fs", CLASS_PATH: "/opt/extra.jar"})
    assert merged[FILE_IMPL] == "org.example.Fs"
    assert merged[CLASS_PATH] == f"{jar}{os.pathsep}/opt/extra.jar"


def test_resubmitting_locally_adds_delta_and_the_file_system(jar: Path) -> None:
    command = resubmit_command(_conf(spark__jars="/u/a.jar", spark__master="local[2]"), "submit")
    assert command[:5] == [
        "submit",
        "--jars",
        "/u/a.jar,/jars/delta-spark.jar",
        "--master",
        "local[2]",
    ]
    assert _confs(command) == {
        **LOCAL_FS_CLASSES,
        CLASS_PATH: str(jar),
        JAVA_OPTIONS: DRIVER_GC_OPTIONS,
    }


def test_the_driver_gc_options_come_before_the_callers() -> None:
    assert with_driver_gc({"a": "b"}) == {"a": "b", JAVA_OPTIONS: DRIVER_GC_OPTIONS}
    merged = with_driver_gc({JAVA_OPTIONS: "-XX:InitiatingHeapOccupancyPercent=50 -Dx=1"})
    flags = merged[JAVA_OPTIONS].split()
    assert flags[: len(DRIVER_GC_OPTIONS.split())] == DRIVER_GC_OPTIONS.split()
    assert flags[-2:] == ["-XX:InitiatingHeapOccupancyPercent=50", "-Dx=1"]


def test_a_local_driver_gets_both(jar: Path) -> None:
    merged = with_local_driver({JAVA_OPTIONS: "-Dx=1"})
    assert merged[CLASS_PATH] == str(jar)
    assert merged[JAVA_OPTIONS] == f"{DRIVER_GC_OPTIONS} -Dx=1"


def test_resubmitting_keeps_the_submitted_java_options(jar: Path) -> None:
    command = resubmit_command(_conf(spark__driver__extraJavaOptions="-Dx=1"), "submit")
    assert _confs(command)[JAVA_OPTIONS] == f"{DRIVER_GC_OPTIONS} -Dx=1"


def test_resubmitting_without_a_master_is_local(jar: Path) -> None:
    command = resubmit_command(_conf(spark__driver__extraClassPath="/opt/x.jar"), "submit")
    assert "--master" not in command
    assert _confs(command)[CLASS_PATH] == f"{jar}{os.pathsep}/opt/x.jar"


@pytest.mark.parametrize("master", ["yarn", "spark://host:7077", "local-cluster[2,1,1024]"])
def test_resubmitting_to_a_cluster_adds_no_file_system(jar: Path, master: str) -> None:
    command = resubmit_command(_conf(spark__master=master), "submit")
    assert command == ["submit", "--jars", "/jars/delta-spark.jar", "--master", master]


def test_a_job_started_here_schedules_fairly_unless_told_otherwise() -> None:
    """Table maintenance's pool shares the executors with the stream's batches (FAIR); the
    user's --spark-conf wins, and under spark-submit the submitter's setting stands."""
    from streaming_jobs.spark_session import SCHEDULER_MODE, job_settings

    assert job_settings({}, "spark://h:7077", True)[SCHEDULER_MODE] == "FAIR"
    assert job_settings({SCHEDULER_MODE: "FIFO"}, None, True)[SCHEDULER_MODE] == "FIFO"
    assert SCHEDULER_MODE not in job_settings({"a": "1"}, None, False)
