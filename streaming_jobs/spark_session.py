"""A Spark session with Delta for local runs and tests, using jars fetched by ``make setup``.

Delta's JVM jars do not come with the ``delta-spark`` pip package; ``make setup`` copies
``io.delta:delta-spark_<spark>_2.13`` and its runtime dependencies into ``.jars/`` so runs need
no network. ``DELTA_JARS_DIR`` points elsewhere. Of those, only the artifacts Spark does not ship
itself are handed to it (:func:`delta_jars`); ``make setup`` and the Docker build delete the
others (``devtools/prune_jars.py``).

Local sessions this module launches also get the spawn-free local file system
(``tools/local-fs``, built by ``make setup``) for ``file:`` paths: without Hadoop's native
library, Hadoop's own one runs ``chmod`` and ``readlink`` processes for each file Spark's
checkpoint and Delta's log write, about forty per micro-batch. ``LOCAL_FS_JAR`` points at
another build of the jar; a session setting of ``spark.hadoop.fs.file.impl`` (and
``spark.hadoop.fs.AbstractFileSystem.file.impl``) replaces it.

Their driver JVM also gets G1 settings (:data:`DRIVER_GC_OPTIONS`) that keep Spark's large
buffers from starting old-generation marking over and over.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pyspark
from pyspark import SparkConf
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^/]*)\.jar$")
"""``<artifact>-<version>.jar``, the file names Maven copies: the version starts at the first
hyphen followed by a digit (``zstd-jni-1.5.7-3.jar``, ``delta-spark_4.2_2.13-4.4.0.jar``)."""


def jar_artifact(file_name: str) -> str:
    """The artifact id in a jar's file name (the whole stem when it carries no version)."""
    match = JAR_NAME.match(file_name)
    return match["artifact"] if match else file_name.removesuffix(".jar")


def spark_jar_artifacts() -> frozenset[str]:
    """Artifact ids of the jars Spark itself puts on its class path (``$SPARK_HOME/jars``,
    else the installed PySpark's ``jars`` folder); empty when neither is there."""
    home = os.environ.get("SPARK_HOME")
    folder = Path(home) / "jars" if home else Path(pyspark.__file__).parent / "jars"
    if not folder.is_dir():
        return frozenset()
    return frozenset(jar_artifact(p.name) for p in folder.glob("*.jar"))


def delta_jars() -> list[str]:
    """Paths of the Delta jars to hand to Spark; empty when none were fetched.

    Maven copies Delta's whole runtime closure, which includes artifacts Spark ships itself
    (Hadoop's client, Parquet, Jackson, Scala, log4j, ...) in other versions. Spark's own
    class path is searched first, so those copies would never load: they are left out, and
    only what Spark lacks (Delta's jars and their own dependencies) is handed over.
    """
    folder = Path(os.environ.get("DELTA_JARS_DIR", REPO_ROOT / ".jars"))
    if not folder.is_dir():
        return []
    shipped = spark_jar_artifacts()
    return sorted(str(p) for p in folder.glob("*.jar") if jar_artifact(p.name) not in shipped)


def prepare_local_environment() -> None:
    """Python workers must run this interpreter and connect back over loopback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def with_delta(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Add Delta's SQL extension, catalog and (when present) the local jars to ``builder``."""
    jars = delta_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        log.warning("no Delta jars in %s: run `make setup`", REPO_ROOT / ".jars")
    return builder.config("spark.sql.extensions", DELTA_EXTENSION).config(
        "spark.sql.catalog.spark_catalog", DELTA_CATALOG
    )


def local_spark(
    app_name: str = "mqtt-ingest", master: str = "local[2]", **conf: str
) -> SparkSession:
    """A local Spark session with Delta, tuned for small, quick micro-batches."""
    prepare_local_environment()
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.metricsEnabled", "false")
        .config("spark.databricks.delta.snapshotPartitions", "2")
    )
    settings = {key.replace("__", "."): value for key, value in conf.items()}
    if _one_jvm(master):
        settings = with_local_driver(settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return with_delta(builder).getOrCreate()


LOCAL_FS_CLASSES = {
    "spark.hadoop.fs.file.impl": "mqtt.lakehouse.localfs.SpawnFreeLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "mqtt.lakehouse.localfs.SpawnFreeLocalFs",
}
CLASS_PATH = "spark.driver.extraClassPath"


def local_fs_jar() -> Path | None:
    """The spawn-free local file system's jar, when ``make setup`` built it."""
    jar = Path(
        os.environ.get("LOCAL_FS_JAR", REPO_ROOT / ".jars" / "local-fs" / "spawn-free-local-fs.jar")
    )
    return jar if jar.is_file() else None


def with_local_fs(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` plus the settings that put ``file:`` paths on the spawn-free local file system
    (its jar joins the driver's class path; only for a driver JVM this process launches, where
    the tasks run too). Settings already in ``conf`` win; unchanged without the jar."""
    jar = local_fs_jar()
    if jar is None:
        log.info("no spawn-free local file system jar: `make setup` builds it (needs javac)")
        return dict(conf)
    merged = {**LOCAL_FS_CLASSES, **conf}
    merged[CLASS_PATH] = os.pathsep.join(p for p in (str(jar), conf.get(CLASS_PATH)) if p)
    return merged


JAVA_OPTIONS = "spark.driver.extraJavaOptions"
DRIVER_GC_OPTIONS = "-XX:-G1UseAdaptiveIHOP -XX:InitiatingHeapOccupancyPercent=70"
"""G1 settings for a local driver JVM. Spark allocates buffers of half a heap region or more
(4 MiB broadcast blocks, 1 MiB task-result chunks), which G1 places as humongous objects, and
each such allocation starts a concurrent marking once the old generation is above G1's
adaptive threshold. With Spark's own objects at 100-200 MiB of the default 1 GiB heap, the
adaptive threshold sat below that, so a marking ran for most of every micro-batch: 0.2-0.7
CPU-seconds per 100,000 messages on two cores (``bench.ingest``'s profile). A fixed threshold
of 70 % starts markings only when the old generation really fills; young collections still
free dead humongous buffers at once."""


def with_driver_gc(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with :data:`DRIVER_GC_OPTIONS` ahead of the caller's own driver Java options
    (the JVM takes the last value of a flag, so the caller's win)."""
    given = conf.get(JAVA_OPTIONS, "")
    return {**conf, JAVA_OPTIONS: " ".join(p for p in (DRIVER_GC_OPTIONS, given) if p)}


def with_local_driver(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` plus what a driver JVM that runs the tasks itself gets: the spawn-free local
    file system (:func:`with_local_fs`) and the G1 settings (:func:`with_driver_gc`)."""
    return with_driver_gc(with_local_fs(conf))


def _one_jvm(master: str) -> bool:
    """Whether ``master`` runs the tasks in the driver's JVM (``local``, ``local[N]``, ...)."""
    return master == "local" or master.startswith("local[")


REEXEC_MARKER = "MQTT_INGEST_DELTA_JARS_ADDED"


def submit_lacks_delta() -> bool:
    """True when spark-submit started this process without Delta on its class path.

    Jars given to an already running driver JVM do not reach its class loader, so a job
    launched like that must be submitted again with ``--jars`` (see ``resubmit_with_delta``).
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ or os.environ.get(REEXEC_MARKER):
        return False
    conf = _submitted_conf()
    wanted = " ".join(conf.get(key, "") or "" for key in ("spark.jars", "spark.jars.packages"))
    return "delta-spark" not in wanted and "delta-core" not in wanted and bool(delta_jars())


def _submitted_conf() -> SparkConf:
    """The settings spark-submit gave its JVM (``--jars``, ``--master``, ...): a ``SparkConf``
    reads them only through the gateway, so connect to it first."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    return SparkConf()


def resubmit_command(conf: SparkConf, submit: str) -> list[str]:
    """``spark-submit`` with the submitted jars plus Delta's and the submitted master; for a
    ``local`` master (the default) also the local driver's settings (:func:`with_local_driver`)
    merged with the submitted class path and driver Java options."""
    jars = [j for j in (conf.get("spark.jars", "") or "").split(",") if j] + delta_jars()
    command = [submit, "--jars", ",".join(jars)]
    master = conf.get("spark.master", None)
    if master:
        command += ["--master", master]
    if _one_jvm(master or "local[*]"):
        keys = (CLASS_PATH, JAVA_OPTIONS, *LOCAL_FS_CLASSES)
        given = {key: conf.get(key) or "" for key in keys if conf.contains(key)}
        for key, value in with_local_driver(given).items():
            command += ["--conf", f"{key}={value}"]
    return command


def resubmit_with_delta(script: str, argv: list[str]) -> None:
    """Replace this process with ``spark-submit --jars <Delta jars> script argv``."""
    conf = _submitted_conf()
    spark_home = os.environ.get("SPARK_HOME", "")
    submit = os.path.join(spark_home, "bin", "spark-submit") if spark_home else "spark-submit"
    command = resubmit_command(conf, submit)
    os.environ[REEXEC_MARKER] = "1"
    os.environ.pop("PYSPARK_GATEWAY_PORT", None)
    os.environ.pop("PYSPARK_GATEWAY_SECRET", None)
    log.info("adding Delta's jars from %s and submitting again", REPO_ROOT / ".jars")
    _die_with_parent()
    os.execv(command[0], [*command, script, *argv])


def _die_with_parent() -> None:
    """Ask Linux to send SIGTERM to this process (and what it execs into) when its parent,
    the first spark-submit JVM, dies: a SIGTERM to that JVM then stops the re-submitted job
    instead of leaving it running on its own (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        log.debug("PR_SET_PDEATHSIG is not available here")


SCHEDULER_MODE = "spark.scheduler.mode"
"""FAIR in a session the job starts itself (unless ``--spark-conf`` says otherwise): table
maintenance runs its jobs in a pool of its own (``streaming_jobs/table_maintenance.py``), and
the stream's batches then share the executor slots with a compaction instead of queueing
behind all of its tasks. Under spark-submit the submitter's setting stands."""


def job_settings(conf: dict[str, str], master: str | None, launched_here: bool) -> dict[str, str]:
    """The settings :func:`job_spark` adds to ``conf`` (which wins): in a session the job
    starts itself, :data:`SCHEDULER_MODE` FAIR, and the local driver's when it is one JVM."""
    if not launched_here:
        return dict(conf)
    settings = {SCHEDULER_MODE: "FAIR", **conf}
    return with_local_driver(settings) if _one_jvm(master or "local") else settings


def job_spark(
    app_name: str, master: str | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """The session for a job: the one spark-submit configured, plus Delta when it lacks it;
    under plain ``python``, a local session (``master`` or ``local[2]``; a ``local`` master
    gets the spawn-free local file system, and :data:`SCHEDULER_MODE` FAIR). ``conf``: more
    settings (``--spark-conf``)."""
    prepare_local_environment()
    builder = SparkSession.builder.appName(app_name)
    launched_here = "PYSPARK_GATEWAY_PORT" not in os.environ  # not by spark-submit
    if master:
        builder = builder.master(master)
    elif launched_here:
        builder = builder.master("local[2]").config("spark.driver.host", "127.0.0.1")
    for key, value in job_settings(conf or {}, master, launched_here).items():
        builder = builder.config(key, value)
    return with_delta(builder).getOrCreate()
