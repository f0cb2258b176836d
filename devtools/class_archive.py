"""A class-data archive (JDK AppCDS) for the local Spark driver JVMs of a test run:
``python -m devtools.class_archive [PATH]`` builds it, :func:`submit_opts` names it to them.

Every test that runs the ingest job, a Spark Connect server or a pipeline starts a driver JVM,
and a good part of that start is loading and verifying the same classes again: Spark's, Delta's
and the JDK's. A dynamic archive (``-XX:ArchiveClassesAtExit``) written by one short workload
of the same kind maps those classes from one file instead. The archive serves JVMs whose class
path starts as the workload's did (the local driver's: the spawn-free local file system's jar,
then PySpark's); any other JVM, or one started while the archive is not there yet, starts as
without it (``-Xshare:auto``, its CDS messages off).

The archive goes to the driver JVMs through ``SPARK_SUBMIT_OPTS``, which Spark's launcher adds
to the JVM it starts for ``spark-submit``, ``pyspark`` and PySpark's own gateway; no other JVM
sees it. It is a cache of the machine's JDK and jars: its name carries a digest of both, and
building one removes the others.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devtools import REPO_ROOT

log = logging.getLogger(__name__)

OPTS_ENV = "SPARK_SUBMIT_OPTS"
ARCHIVE_DIR = REPO_ROOT / ".jars" / "class-archive"
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
"""A JVM whose class path does not fit the archive says so on stdout unless told not to."""
BUILD_TIMEOUT = 300.0
"""The workload, and the JVM's writing of the archive after it."""


def archive_path() -> Path:
    """Where the archive for this machine's JDK and this checkout's jars is kept."""
    from pyspark.find_spark_home import _find_spark_home

    from streaming_jobs.spark_session import delta_jars, local_fs_jar

    digest = hashlib.sha256()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    digest.update(java.stderr.encode())
    jars = sorted((Path(_find_spark_home()) / "jars").glob("*.jar"))
    for jar in [*jars, *(Path(j) for j in delta_jars()), local_fs_jar()]:
        if jar is not None:
            digest.update(f"{jar}:{jar.stat().st_size}\n".encode())
    return ARCHIVE_DIR / f"spark-{digest.hexdigest()[:16]}.jsa"


def submit_opts(path: Path, given: str | None = None) -> str:
    """``SPARK_SUBMIT_OPTS`` that names the archive at ``path``, after ``given``."""
    own = shlex.join([f"-XX:SharedArchiveFile={path}", *QUIET])
    return " ".join(p for p in (given, own) if p)


def build(path: Path) -> Path:
    """Write the archive at ``path`` unless it is there: the workload (:func:`_workload`) in a
    process of its own, its JVM dumping what it loaded when it exits. The file appears whole
    (written beside it, then renamed), so a JVM that starts meanwhile never maps half of it."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    env = {
        **os.environ,
        OPTS_ENV: shlex.join([f"-XX:ArchiveClassesAtExit={partial}", *QUIET]),
    }
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "devtools.class_archive", "--workload"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        timeout=BUILD_TIMEOUT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # PySpark's JVM exits after its Python process, and writes the archive on its way out.
    deadline = time.monotonic() + BUILD_TIMEOUT
    while not _complete(partial):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no class-data archive at {partial} after {BUILD_TIMEOUT:.0f} s")
        time.sleep(0.5)
    partial.replace(path)
    for stale in path.parent.glob("spark-*.jsa"):  # for other jars or another JDK
        if stale != path:
            stale.unlink(missing_ok=True)
    log.info("class-data archive %s written in %.0f s", path, time.monotonic() - began)
    return path


def _complete(partial: Path) -> bool:
    """Whether the dumping JVM is done with ``partial``: the file exists and no process has it
    open any longer."""
    if not partial.is_file():
        return False
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == str(partial) for fd in fd_dir.iterdir()):
                return False
        except OSError:
            continue
    return True


def _workload() -> None:
    """What most test drivers do: a local session with Delta, a table written, read,
    compacted, and a stream of it into another with ``foreachBatch``."""
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame

    from streaming_jobs.spark_session import local_spark

    spark = local_spark("class-archive")
    with tempfile.TemporaryDirectory() as tmp:
        source, target = f"{tmp}/source", f"{tmp}/target"
        for n in range(3):
            spark.range(n * 10, n * 10 + 10).selectExpr("id", "cast(id as string) s").write.format(
                "delta"
            ).mode("append").save(source)
        DeltaTable.forPath(spark, source).optimize().executeCompaction()
        spark.read.format("delta").load(source).where("id > 3").count()

        def write(batch: DataFrame, batch_id: int) -> None:
            batch.write.format("delta").mode("append").option("txnAppId", "a").option(
                "txnVersion", batch_id
            ).save(target)

        query = (
            spark.readStream.format("delta")
            .load(source)
            .writeStream.foreachBatch(write)
            .trigger(availableNow=True)
            .option("checkpointLocation", f"{tmp}/checkpoint")
            .start()
        )
        query.awaitTermination()
        spark.sql(f"DESCRIBE DETAIL delta.`{target}`").collect()
    spark.stop()


def main(argv: list[str]) -> int:
    if argv == ["--workload"]:
        _workload()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = Path(argv[0]) if argv else archive_path()
    log.info("%s", build(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
