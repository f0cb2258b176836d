"""The spawn-free local file system (``tools/local-fs``) of the test run's local Spark session.

Rules under test: ``file:`` paths of a session launched by ``streaming_jobs.spark_session`` go
through it (both Hadoop APIs: ``FileSystem`` and ``FileContext``); it gives the same answers as
Hadoop's own local file system (permissions, link status, a missing file); and creating and
renaming files through it starts no processes, where Hadoop's own starts several per file.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming_jobs.spark_session import LOCAL_FS_CLASSES, local_fs_jar, with_local_fs

PACKAGE = "mqtt.lakehouse.localfs"
HADOOP_LOCAL_FS = "org.apache.hadoop.fs.local.LocalFs"

pytestmark = pytest.mark.skipif(
    local_fs_jar() is None and shutil.which("javac") is None,
    reason="no JDK to build tools/local-fs (`make setup` builds it when javac is present)",
)


def _jvm(spark: SparkSession) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm


def _conf(spark: SparkSession) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()


def _hadoop_path(jvm: Any, path: Path | str) -> Any:
    return jvm.org.apache.hadoop.fs.Path(str(path))


def _raw_file_systems(spark: SparkSession) -> tuple[Any, Any]:
    """(ours, Hadoop's own) raw local file systems."""
    jvm = _jvm(spark)
    uri = jvm.java.net.URI("file:///")
    ours = jvm.org.apache.hadoop.fs.FileSystem.get(uri, _conf(spark)).getRawFileSystem()
    hadoops = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    hadoops.initialize(uri, _conf(spark))
    return ours, hadoops


def _file_context(spark: SparkSession, implementation: str | None = None) -> Any:
    """A ``FileContext`` for ``file:``: the session's, or one over ``implementation``."""
    jvm = _jvm(spark)
    conf = jvm.org.apache.hadoop.conf.Configuration(_conf(spark))
    if implementation is not None:
        conf.set("fs.AbstractFileSystem.file.impl", implementation)
    return jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)


def _processes_started() -> int:
    """Processes started on this machine since boot (``processes`` in /proc/stat)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("processes "):
            return int(line.split()[1])
    raise AssertionError("no processes line in /proc/stat")


def _write_and_rename(spark: SparkSession, context: Any, folder: Path, files: int) -> None:
    """What Spark's checkpoint and Delta's log do per file: create a temporary file, write
    it, rename it over its final name."""
    jvm = _jvm(spark)
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    create = jvm.java.util.EnumSet.of(jvm.org.apache.hadoop.fs.CreateFlag.CREATE)
    no_options = gateway.new_array(jvm.org.apache.hadoop.fs.Options.CreateOpts, 0)
    overwrite = gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
    overwrite[0] = jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
    for index in range(files):
        temporary = _hadoop_path(jvm, f"file:{folder}/.{index}.tmp")
        stream = context.create(temporary, create, no_options)
        stream.write(bytearray(b"{}"))
        stream.close()
        context.rename(temporary, _hadoop_path(jvm, f"file:{folder}/{index}"), overwrite)


def test_file_paths_use_the_spawn_free_file_system(spark: SparkSession) -> None:
    assert local_fs_jar() is not None, "`make setup` did not build tools/local-fs"
    jvm = _jvm(spark)
    uri = jvm.java.net.URI("file:///")
    file_system = jvm.org.apache.hadoop.fs.FileSystem.get(uri, _conf(spark))
    assert file_system.getClass().getName() == f"{PACKAGE}.SpawnFreeLocalFileSystem"
    assert file_system.getRawFileSystem().getClass().getName() == (
        f"{PACKAGE}.SpawnFreeRawLocalFileSystem"
    )
    context = _file_context(spark)
    assert context.getDefaultFileSystem().getClass().getName() == f"{PACKAGE}.SpawnFreeLocalFs"


def test_settings_keep_the_callers_own() -> None:
    jar = local_fs_jar()
    assert jar is not None
    mine = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem"}
    merged = with_local_fs({**mine, "spark.driver.extraClassPath": "/opt/extra.jar"})
    assert merged["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.LocalFileSystem"
    assert (
        merged["spark.hadoop.fs.AbstractFileSystem.file.impl"]
        == (LOCAL_FS_CLASSES["spark.hadoop.fs.AbstractFileSystem.file.impl"])
    )
    assert merged["spark.driver.extraClassPath"] == f"{jar}{os.pathsep}/opt/extra.jar"


@pytest.mark.parametrize("mode", ["640", "600", "755", "444", "1777"])
def test_permissions_are_set_as_hadoop_sets_them(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    jvm = _jvm(spark)
    ours, hadoops = _raw_file_systems(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    for name, file_system in (("ours", ours), ("hadoops", hadoops)):
        target = tmp_path / name
        target.mkdir()  # a directory: the sticky bit (1777) is allowed on it
        file_system.setPermission(_hadoop_path(jvm, target), permission)
        assert stat.S_IMODE(target.stat().st_mode) == int(mode, 8), name
        target.chmod(0o700)  # let pytest clean up


def test_a_missing_file_is_reported_as_missing(spark: SparkSession, tmp_path: Path) -> None:
    jvm = _jvm(spark)
    ours, _ = _raw_file_systems(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission("644")
    with pytest.raises(Exception, match="FileNotFoundException"):
        ours.setPermission(_hadoop_path(jvm, tmp_path / "missing"), permission)
    with pytest.raises(Exception, match="FileNotFoundException"):
        ours.getFileLinkStatus(_hadoop_path(jvm, tmp_path / "missing"))


def test_link_status_is_hadoops(spark: SparkSession, tmp_path: Path) -> None:
    jvm = _jvm(spark)
    ours, hadoops = _raw_file_systems(spark)
    regular = tmp_path / "regular"
    regular.write_bytes(b"x" * 123)
    link = tmp_path / "link"
    link.symlink_to(regular)
    folder = tmp_path / "folder"
    folder.mkdir()
    seen = []
    for path in (regular, link, folder, f"file:{regular}", f"file:{link}", f"file:{folder}"):
        answers = []
        for file_system in (ours, hadoops):
            status = file_system.getFileLinkStatus(_hadoop_path(jvm, path))
            answers.append(
                (
                    bool(status.isSymlink()),
                    str(status.getSymlink().toUri().getPath()) if status.isSymlink() else None,
                    bool(status.isDirectory()),
                    int(status.getLen()),
                    str(status.getPath().toUri().getPath()),
                )
            )
        assert answers[0] == answers[1], path
        seen.append(answers[0])
    # the unqualified link is a link to the regular file; everything else is what it points at
    assert seen[1][:2] == (True, str(regular))
    assert [answer[0] for answer in seen] == [False, True, False, False, False, False]
    assert seen[0][3] == seen[4][3] == 123


def test_creating_and_renaming_starts_no_processes(spark: SparkSession, tmp_path: Path) -> None:
    files = 20
    for name in ("warm-ours", "warm-hadoops", "ours", "hadoops"):
        (tmp_path / name).mkdir()
    ours = _file_context(spark)
    hadoops = _file_context(spark, HADOOP_LOCAL_FS)
    _write_and_rename(spark, ours, tmp_path / "warm-ours", 2)
    _write_and_rename(spark, hadoops, tmp_path / "warm-hadoops", 2)

    before = _processes_started()
    _write_and_rename(spark, ours, tmp_path / "ours", files)
    by_ours = _processes_started() - before
    before = _processes_started()
    _write_and_rename(spark, hadoops, tmp_path / "hadoops", files)
    by_hadoops = _processes_started() - before

    for name in ("ours", "hadoops"):
        written = sorted(p.name for p in (tmp_path / name).iterdir() if not p.name.startswith("."))
        assert written == sorted(str(i) for i in range(files))
        assert (tmp_path / name / "7").read_bytes() == b"{}"
        # the checksum files were renamed with their files
        assert (tmp_path / name / ".7.crc").is_file()
    # Hadoop's own spawns chmod and readlink for every file (ten each here); the rest of the
    # machine may start a few processes meanwhile
    assert by_hadoops >= 5 * files, by_hadoops
    assert by_ours < by_hadoops / 4, (by_ours, by_hadoops)
