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

from connector.receiver.receiver import sum_delivery
from connector.receiver.shard_handles import ShardStatus

REPORT_VERSION = 1
"""The shape of the report; fields are only added within a version."""


def receiver_report(
    index: int, status: ShardStatus, batch_end: int | None = None
) -> dict[str, Any]:
    """One receiver's figures: ``walHighWaterMark`` (the WAL's next offset), ``committed``
    (the offset the query committed up to: the start of the batch being planned),
    ``batchEnd`` (the offset that batch reads up to; ``committed`` before any plan),
    ``backlog`` (messages stored beyond the batch: what waits once it commits, as Kafka's
    offsets behind latest), ``oldestUncommittedSeconds`` (how long the message at
    ``committed`` has waited; 0 with nothing uncommitted, null when unknown), ``received``
    (messages stored by this run's receiver),
    ``receiveRate`` (messages per second over the last 10 s), ``walBytes`` (bytes the WAL
    holds), ``connected``, ``subscribed`` (the broker holds the receiver's subscriptions and
    queues for it), ``reconnects`` (connections after the first), ``frozen`` (an
    AvailableNow run stopped it), and its delivery counters (``Receiver.figures``)."""
    figures = status.delivery
    connections = int(figures.get("connections", 0))
    age = figures.get("oldestUncommittedSeconds")
    end = status.committed if batch_end is None else max(batch_end, status.committed)
    return {
        "receiver": index,
        "walHighWaterMark": status.next,
        "committed": status.committed,
        "batchEnd": end,
        "backlog": max(0, status.next - end),
        "oldestUncommittedSeconds": None if age is None else float(age),
        "received": int(figures.get("received", 0)),
        "receiveRate": float(figures.get("receiveRate", 0.0)),
        "walBytes": int(figures.get("walBytes", 0)),
        "connected": bool(figures.get("connected", False)),
        "subscribed": bool(figures.get("subscribed", False)),
        "reconnects": max(0, connections - 1),
        "frozen": status.frozen,
        "duplicatesDropped": int(figures.get("duplicatesDropped", 0)),
        "possibleDuplicates": int(figures.get("possibleDuplicates", 0)),
        "brokerFaults": dict(figures.get("brokerFaults") or {}),
    }


def progress_report(
    offset: Mapping[str, Any],
    statuses: Sequence[ShardStatus] | None,
    batch_ends: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The reported latest offset: ``offset`` (the WAL positions) with the version, the summed
    delivery counters and one entry per receiver (none before the receivers started);
    ``batch_ends``: each receiver's end of the batch just planned (None: none planned)."""
    statuses = list(statuses or ())
    ends = list(batch_ends or ())
    return {
        **offset,
        "version": REPORT_VERSION,
        "delivery": sum_delivery([s.delivery for s in statuses]),
        "receivers": [
            receiver_report(i, s, ends[i] if i < len(ends) else None)
            for i, s in enumerate(statuses)
        ],
    }
