"""The source's figures in the query progress: ``query.lastProgress["sources"][0]
["latestOffset"]``, which Spark fills from ``reportLatestOffset`` and never stores.

A Python source cannot fill the progress's ``metrics`` (Spark's ``PythonMicroBatchStream`` has
no ``ReportsSourceMetrics``), so the figures ride in the reported latest offset, a JSON object
of a stable, versioned shape (docs/operations.md, "Metrics in the query progress"):

* the WAL offsets of the latest offset (``wal``/``offset``, or ``shards`` with several
  receivers), as Spark's offsets have them;
* ``version``: :data:`REPORT_VERSION`, raised when a field changes meaning or goes;
* ``delivery``: the receivers' delivery counters added up (``duplicatesDropped``,
  ``possibleDuplicates``, ``brokerFaults`` by rule);
* ``receivers``: one object per receiver (:func:`receiver_report`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .receiver import sum_delivery
from .shard_handles import ShardStatus

REPORT_VERSION = 1
"""The shape of the report; fields are only added within a version."""


def receiver_report(index: int, status: ShardStatus) -> dict[str, Any]:
    """One receiver's figures: ``walHighWaterMark`` (the WAL's next offset), ``committed``
    (the offset the query committed up to), ``backlog`` (messages stored and not committed),
    ``connected``, ``reconnects`` (connections after the first), ``frozen`` (an AvailableNow
    run stopped it), and its delivery counters."""
    delivery = status.delivery
    connections = int(delivery.get("connections", 0))
    return {
        "receiver": index,
        "walHighWaterMark": status.next,
        "committed": status.committed,
        "backlog": max(0, status.next - status.committed),
        "connected": bool(delivery.get("connected", False)),
        "reconnects": max(0, connections - 1),
        "frozen": status.frozen,
        "duplicatesDropped": int(delivery.get("duplicatesDropped", 0)),
        "possibleDuplicates": int(delivery.get("possibleDuplicates", 0)),
        "brokerFaults": dict(delivery.get("brokerFaults") or {}),
    }


def progress_report(
    offset: Mapping[str, Any], statuses: Sequence[ShardStatus] | None
) -> dict[str, Any]:
    """The reported latest offset: ``offset`` (the WAL positions) with the version, the summed
    delivery counters and one entry per receiver (none before the receivers started)."""
    statuses = list(statuses or ())
    return {
        **offset,
        "version": REPORT_VERSION,
        "delivery": sum_delivery([s.delivery for s in statuses]),
        "receivers": [receiver_report(i, s) for i, s in enumerate(statuses)],
    }
