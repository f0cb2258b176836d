"""The G1 settings of the test run's local Spark session (``DRIVER_GC_OPTIONS``).

Rule under test: a local driver JVM launched by ``streaming_jobs.spark_session`` runs G1 with a
fixed marking threshold of 70 % instead of G1's adaptive one, read back from the running JVM.
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
    assert _vm_option(spark, "UseG1GC") == "true"
    assert _vm_option(spark, "G1UseAdaptiveIHOP") == "false"
    assert _vm_option(spark, "InitiatingHeapOccupancyPercent") == "70"
