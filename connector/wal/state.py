"""The QoS session state the WAL keeps durable for the receiver.

* ``pending_qos2``: packet ids of QoS 2 messages appended whose PUBREL has not been appended.
* ``digests``: packet id -> :func:`~connector.wal.records.record_digest` of the latest
  QoS 1 or QoS 2 message appended with that id: tells a pending QoS 2 id's resend from another
  message a faulty broker gave that id, and counts possible duplicates (docs/delivery.md).

Each segment starts with a snapshot of this state, so it survives deletion of older segments;
recovery replays the active segment's data and release records on top of its snapshot.
Snapshot body: ``u32 n | u32 m | n x u16 pending id | m x u16 digest id | m x u32 digest``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

_COUNTS = struct.Struct("<II")
MAX_PACKET_ID = 0xFFFF


class QosState:
    """Pending QoS 2 packet ids and the latest message digest per packet id."""

    __slots__ = ("digests", "pending_qos2")

    def __init__(
        self,
        pending_qos2: Iterable[int] = (),
        digests: dict[int, int] | None = None,
    ) -> None:
        self.pending_qos2: set[int] = set(pending_qos2)
        self.digests: dict[int, int] = dict(digests or {})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QosState):
            return NotImplemented
        return self.pending_qos2 == other.pending_qos2 and self.digests == other.digests

    # Mutable, so unhashable: a class that defines __eq__ without __hash__ gets __hash__ = None.

    def __repr__(self) -> str:
        return (
            f"QosState(pending_qos2={sorted(self.pending_qos2)}, "
            f"digests={dict(sorted(self.digests.items()))})"
        )

    def apply_release(self, packet_ids: Iterable[int]) -> None:
        """Forget released QoS 2 packet ids."""
        self.pending_qos2.difference_update(packet_ids)

    def merge(
        self,
        digests: Mapping[int, int],
        qos2_ids: Iterable[int] = (),
        undo: dict[int, int | None] | None = None,
    ) -> None:
        """Account for stored messages: ``digests`` (packet id -> record digest, in store
        order, so the latest wins) and ``qos2_ids``, the QoS 2 ids among them, now pending.

        With ``undo``, first note there the digest each id held before its first merge
        (None: none), for :meth:`revert`."""
        if undo is not None:
            get = self.digests.get
            for pid in digests.keys() - undo.keys():
                undo[pid] = get(pid)
        self.digests.update(digests)
        self.pending_qos2.update(qos2_ids)

    def revert(
        self, added: Iterable[int], released: Iterable[int], undo: Mapping[int, int | None]
    ) -> None:
        """Undo a failed append: drop the QoS 2 ids it ``added``, restore the ids it
        ``released`` and the digests noted in ``undo`` by :meth:`merge`."""
        self.pending_qos2.difference_update(added)
        self.pending_qos2.update(released)
        digests = self.digests
        for pid, digest in undo.items():
            if digest is None:
                digests.pop(pid, None)
            else:
                digests[pid] = digest

    def encode(self) -> bytes:
        """The snapshot body written at the start of every segment."""
        pending = sorted(self.pending_qos2)
        digests = sorted(self.digests.items())
        return b"".join(
            (
                _COUNTS.pack(len(pending), len(digests)),
                struct.pack(f"<{len(pending)}H", *pending),
                struct.pack(f"<{len(digests)}H", *(k for k, _ in digests)),
                struct.pack(f"<{len(digests)}I", *(v for _, v in digests)),
            )
        )

    @classmethod
    def decode(cls, body: bytes | memoryview) -> QosState:
        """Parse a snapshot body; ValueError (or struct.error) when it is malformed."""
        n, m = _COUNTS.unpack_from(body, 0)
        if n > MAX_PACKET_ID + 1 or m > MAX_PACKET_ID + 1:
            raise ValueError(f"state snapshot claims {n} pending ids and {m} digests")
        if len(body) != _COUNTS.size + 2 * n + 6 * m:
            raise ValueError(f"state snapshot holds {len(body)} bytes for {n}+{m} entries")
        at = _COUNTS.size
        pending = struct.unpack_from(f"<{n}H", body, at)
        at += 2 * n
        ids = struct.unpack_from(f"<{m}H", body, at)
        digests = struct.unpack_from(f"<{m}I", body, at + 2 * m)
        return cls(pending, dict(zip(ids, digests, strict=True)))
