"""The G1 settings of the test run's local Spark session (``DRIVER_GC_OPTIONS``).

Rule under test: a local driver JVM launched by ``streaming_jobs.spark_session`` has G1's
adaptive marking threshold off and a fixed one of 70 %, read back from the running JVM. (The
flags are read whatever collector the JVM chose: on a machine with one CPU it picks Serial,
which ignores them.)
"""

from __future__ import annotations

from pyspark.sql import SparkSession


def _vm_option(spark: SparkSession, name: str) -> str:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    bean_class = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(bean_class)
    return str(bean.getVMOption(name).getValue())


def test_the_local_driver_marks_at_a_fixed_threshold(spark: SparkSession) -> None:
    assert _vm_option(spark, "G1UseAdaptiveIHOP") == "false"
    assert _vm_option(spark, "InitiatingHeapOccupancyPercent") == "70"
