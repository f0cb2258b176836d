"""``bench.ingest`` names its peers by WAL store, QoS and broker window, and pairs a peer with
its WAL on the S3 server with ``ours-wal`` of the same QoS and window; ``bench.wal_throughput``
reads its percentiles off sorted append times."""

from __future__ import annotations

import pytest

from bench.ingest import Appends, OursPeer
from bench.wal_throughput import _percentile


@pytest.mark.parametrize(
    ("peer", "name"),
    [
        (OursPeer("wal", 1), "ours-wal"),  # QoS 1 names carry no QoS suffix
        (OursPeer("inline", 2), "ours-inline-qos2"),
        (OursPeer("wal", 1, "s3"), "ours-s3"),
        (OursPeer("inline", 1, "s3"), "ours-s3-inline"),
        (OursPeer("wal", 2, "s3", 0), "ours-s3-qos2-inflight-unbounded"),
        (OursPeer("wal", 1, "local", 1000), "ours-wal-inflight1000"),
    ],
)
def test_peer_names(peer: OursPeer, name: str) -> None:
    assert peer.name == name


def test_a_shared_wal_is_paired_with_the_local_wal_of_its_qos_and_window() -> None:
    assert OursPeer("inline", 2, "s3", 0).local_wal == OursPeer("wal", 2, "local", 0)


def test_appends_separate_stored_reads_from_releases() -> None:
    calls = [(300, 0, 0.004), (0, 20, 0.002), (100, 5, 0.006), (500, 0, 0.008)]
    found = Appends("ours-s3", 900, 0.04, calls).as_dict()
    assert found["appends"] == 4
    assert found["appends_with_messages"] == 3
    assert found["appends_of_releases_only"] == 1
    assert found["messages_per_append"]["median"] == 300
    assert found["messages_per_append"]["max"] == 500
    assert found["append_ms"]["max"] == 8.0
    assert found["share_of_time_in_appends"] == 0.5
    assert found["rate"] == 22_500


def test_percentile_of_sorted_values() -> None:
    values = [float(v) for v in range(1, 11)]
    assert _percentile(values, 0.9) == 9.0
    assert _percentile(values, 1.0) == 10.0
    assert _percentile([3.0], 0.9) == 3.0
