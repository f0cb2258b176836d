"""Which fetched jars a session hands to Spark (``streaming_jobs.spark_session.delta_jars``)
and which ``make setup`` keeps (``devtools.prune_jars``).

Rule under test: every jar in the Delta jars folder goes to Spark unless Spark's own jars
folder (``$SPARK_HOME/jars``, else PySpark's) already holds the same artifact, in any version;
set-up deletes those copies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.prune_jars import prune_shipped_jars
from streaming_jobs import spark_session
from streaming_jobs.spark_session import delta_jars, jar_artifact


@pytest.mark.parametrize(
    ("file_name", "artifact"),
    [
        ("delta-spark_4.2_2.13-4.4.0.jar", "delta-spark_4.2_2.13"),
        ("zstd-jni-1.5.7-3.jar", "zstd-jni"),
        ("hadoop-client-api-3.4.2.jar", "hadoop-client-api"),
        ("log4j-slf4j2-impl-2.25.3.jar", "log4j-slf4j2-impl"),
        ("jackson-datatype-jdk8-2.13.5.jar", "jackson-datatype-jdk8"),
        ("javax.annotation-api-1.3.2.jar", "javax.annotation-api"),
        ("hive-exec-2.3.10-core.jar", "hive-exec"),
        ("spark-core_2.13-4.2.0.jar", "spark-core_2.13"),
        ("no-version.jar", "no-version"),
    ],
)
def test_the_artifact_id_is_the_name_before_the_version(file_name: str, artifact: str) -> None:
    assert jar_artifact(file_name) == artifact


def _jars(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    return folder


def _spark_and_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: list[str], fetched: list[str]
) -> tuple[Path, Path]:
    """A Spark home whose jars folder holds ``shipped`` and a fetched folder holding
    ``fetched``; SPARK_HOME and DELTA_JARS_DIR point at them."""
    spark_home = tmp_path / "spark"
    _jars(spark_home / "jars", *shipped)
    folder = _jars(tmp_path / "delta", *fetched)
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    monkeypatch.setenv("DELTA_JARS_DIR", str(folder))
    return spark_home, folder


def test_jars_spark_already_ships_are_left_out_whatever_their_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, fetched = _spark_and_fetched(
        tmp_path,
        monkeypatch,
        ["hadoop-client-api-3.5.0.jar", "scala-library-2.13.18.jar"],
        [
            "delta-spark_4.2_2.13-4.4.0.jar",
            "delta-storage-4.4.0.jar",
            "hadoop-client-api-3.4.2.jar",
            "scala-library-2.13.17.jar",
            "notes.txt",
        ],
    )
    assert delta_jars() == [
        str(fetched / "delta-spark_4.2_2.13-4.4.0.jar"),
        str(fetched / "delta-storage-4.4.0.jar"),
    ]


def test_without_a_spark_jars_folder_every_fetched_jar_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched = _jars(tmp_path / "delta", "delta-storage-4.4.0.jar", "scala-library-2.13.17.jar")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-here"))
    monkeypatch.setenv("DELTA_JARS_DIR", str(fetched))
    assert len(delta_jars()) == 2


def test_no_fetched_folder_means_no_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DELTA_JARS_DIR", str(tmp_path / "missing"))
    assert delta_jars() == []


def test_the_installed_jars_hand_over_delta_and_nothing_pyspark_ships(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Against the jars ``make setup`` fetched and the installed PySpark."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.delenv("DELTA_JARS_DIR", raising=False)
    jars = delta_jars()
    if not jars:
        pytest.skip("no Delta jars fetched (make setup fetches them)")
    artifacts = {jar_artifact(Path(j).name) for j in jars}
    assert "delta-storage" in artifacts
    assert any(a.startswith("delta-spark_") for a in artifacts)
    assert not artifacts & spark_session.spark_jar_artifacts()
    fetched = {jar_artifact(p.name) for p in Path(jars[0]).parent.glob("*.jar")}
    assert fetched == artifacts  # set-up pruned Maven's copies of what PySpark ships


def test_pruning_deletes_only_the_jars_spark_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark_home, fetched = _spark_and_fetched(
        tmp_path,
        monkeypatch,
        ["hadoop-client-api-3.5.0.jar", "parquet-column-1.15.2.jar"],
        [
            "delta-spark_4.2_2.13-4.4.0.jar",
            "hadoop-client-api-3.4.2.jar",
            "parquet-column-1.16.0.jar",
            "notes.txt",
        ],
    )
    pruned = prune_shipped_jars(fetched)
    assert [p.name for p in pruned] == ["hadoop-client-api-3.4.2.jar", "parquet-column-1.16.0.jar"]
    assert sorted(p.name for p in fetched.iterdir()) == [
        "delta-spark_4.2_2.13-4.4.0.jar",
        "notes.txt",
    ]
    assert sorted(p.name for p in (spark_home / "jars").iterdir()) == [
        "hadoop-client-api-3.5.0.jar",
        "parquet-column-1.15.2.jar",
    ]
    assert delta_jars() == [str(fetched / "delta-spark_4.2_2.13-4.4.0.jar")]


def test_pruning_without_a_spark_jars_folder_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched = _jars(tmp_path / "delta", "delta-storage-4.4.0.jar", "scala-library-2.13.17.jar")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-here"))
    assert prune_shipped_jars(fetched) == []
    assert len(list(fetched.glob("*.jar"))) == 2
