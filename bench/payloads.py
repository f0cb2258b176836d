"""The benchmarks' payloads, each carrying its sequence number (``SEQUENCE_DIGITS`` digits):
first (:func:`numbered`, as ``connector.mqtt pub`` sends; :func:`timed`, with the send time),
or at ``JSON_SEQ_AT`` in a 100-byte JSON (:func:`json_payload`); and the tally of a drain.
"""

from __future__ import annotations

from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

NS_DIGITS = 19
TIMED_HEADER = SEQUENCE_DIGITS + 1 + NS_DIGITS + 1  # sequence number, space, send time, space
JSON_SEQ_AT = len('{"seq":')
JSON_BYTES = 100


def numbered(seq: int, size: int) -> bytes:
    """``size`` bytes: the sequence number, then filler."""
    return (b"%0*d" % (SEQUENCE_DIGITS, seq) + b"x" * max(0, size - SEQUENCE_DIGITS))[:size]


def timed(seq: int, sent_ns: int, size: int) -> bytes:
    """``size`` bytes: the sequence number, the send time in ns since the epoch, filler."""
    head = b"%0*d %0*d " % (SEQUENCE_DIGITS, seq, NS_DIGITS, sent_ns)
    return head + b"x" * max(0, size - len(head))


def parse_timed(data: bytes) -> tuple[int, int]:
    """(sequence number, send time in ns) of a payload made by :func:`timed`."""
    sent_at = SEQUENCE_DIGITS + 1
    return int(data[:SEQUENCE_DIGITS]), int(data[sent_at : sent_at + NS_DIGITS])


_HEAD = (
    f'{{"seq":%0{SEQUENCE_DIGITS}d,"sensor":"line-3/sensor-17","value":%08.3f,"unit":"degC","pad":"'
)
JSON_TEMPLATE = _HEAD + "x" * (JSON_BYTES - len(_HEAD % (0, 0.0)) - 2) + '"}'
"""A printf template (Python ``%`` and Java ``String.format`` alike) of JSON_BYTES bytes."""


def json_payload(seq: int) -> bytes:
    """The JSON payload of message ``seq``: exactly JSON_BYTES bytes."""
    return (JSON_TEMPLATE % (seq, (seq % 1000) / 8)).encode()


def sequence_of(data: bytes, at: int = 0) -> int:
    return int(data[at : at + SEQUENCE_DIGITS])


class Tally:
    """Which of the numbers 0..count-1 arrived and how often; ``at``: where a payload holds it."""

    __slots__ = ("at", "copies", "distinct", "out_of_range", "received")

    def __init__(self, count: int, at: int = 0) -> None:
        self.at = at
        self.copies = [0] * count
        self.received = self.distinct = self.out_of_range = 0

    def note(self, payload: bytes) -> None:
        self.received += 1
        try:
            seq = int(payload[self.at : self.at + SEQUENCE_DIGITS])
        except ValueError:
            self.out_of_range += 1
            return
        if 0 <= seq < len(self.copies):
            if not self.copies[seq]:
                self.distinct += 1
            self.copies[seq] += 1
        else:
            self.out_of_range += 1

    @property
    def missing(self) -> list[int]:
        return [seq for seq, n in enumerate(self.copies) if not n]

    @property
    def extra_copies(self) -> int:
        return self.received - self.distinct - self.out_of_range

    def result(
        self, start: float, connected: float, last: float, connections: int
    ) -> dict[str, Any]:
        """A drain worker's figures: what arrived, and its clocks from ``start``."""
        return {
            "received": self.received, "distinct": self.distinct, "out_of_range": self.out_of_range,
            "duplicates": self.extra_copies, "connect_seconds": connected - start,
            "drain_seconds": last - start, "connections": connections,
        }  # fmt: skip
