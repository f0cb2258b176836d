"""bench.ingest and bench.ingest_s3 without Spark: the peers' names and pairs, the warm-up,
the synthetic peer's tasks, the sessions a query uses, and the appends of the receiver alone."""

from __future__ import annotations

import pytest

from bench.ingest import (
    QOS2_BACKLOG_LIMIT,
    WARMUP_ROWS,
    OursPeer,
    Setup,
    query_sessions,
    synthetic_files_per_batch,
    warmup_rounds,
)
from bench.ingest_s3 import Appends
from connector.options.source import RECORDS_PER_PARTITION


@pytest.mark.parametrize(
    ("peer", "name"),
    [
        (OursPeer("wal", 1), "ours-wal"),  # QoS 1 names carry no QoS suffix
        (OursPeer("inline", 2), "ours-inline-qos2"),
        (OursPeer("inline", 1, "s3"), "ours-s3-inline"),
        (OursPeer("wal", 2, "s3", 0), "ours-s3-qos2-inflight-unbounded"),
        (OursPeer("wal", 1, "local", 1000), "ours-wal-inflight1000"),
    ],
)
def test_peer_names(peer: OursPeer, name: str) -> None:
    assert peer.name == name


def test_a_shared_wal_is_paired_with_the_local_wal_of_its_qos_and_window() -> None:
    assert OursPeer("inline", 2, "s3", 0).local_wal == OursPeer("wal", 2, "local", 0)


@pytest.mark.parametrize(
    ("round_rows", "target", "rounds"),
    [(720_000, WARMUP_ROWS, 1), (QOS2_BACKLOG_LIMIT, WARMUP_ROWS, 10), (200_000, 600_001, 4),
     (60_000, 0, 1), (0, WARMUP_ROWS, 1)],
)  # fmt: skip
def test_warm_up_rounds_land_at_least_the_target(round_rows: int, target: int, rounds: int) -> None:
    assert warmup_rounds(round_rows, target) == rounds


def test_the_synthetic_peer_runs_as_many_tasks_as_the_source_would() -> None:
    assert synthetic_files_per_batch(60_000) == 1
    assert synthetic_files_per_batch(RECORDS_PER_PARTITION + 1) == 2


def test_a_query_with_two_receivers_uses_two_shared_sessions() -> None:
    assert query_sessions("c", 1, Setup("0 seconds", 1.0)) == [("c", "plant/+/+/telemetry")]
    shared = query_sessions("c", 2, Setup("0 seconds", 1.0, ("receivers=2",)))
    assert len(shared) == 2 and all(f.startswith("$share/") for _, f in shared)


def test_appends_separate_stored_reads_from_releases() -> None:
    calls = [(300, 0, 0.004), (0, 20, 0.002), (100, 5, 0.006), (500, 0, 0.008)]
    found = Appends("ours-s3", 900, 0.04, calls).as_dict()
    assert (found["appends"], found["appends_of_releases_only"], found["rate"]) == (4, 1, 22_500)
    assert found["messages_per_append"]["median"] == 300
    assert found["append_ms"]["max"] == 8.0 and found["share_of_time_in_appends"] == 0.5
