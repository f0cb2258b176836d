"""The ledger of what was published, and the check of a table against it: the traffic of the
chaos tests and of the receiver's resend tests, and the counters of a run.

A :class:`LedgerPublisher` publishes numbered payloads (``<tag>-<number>`` and filler, QoS
alternating 1 and 2) and records in a :class:`Ledger` every one the broker acknowledged, so the
broker had every one of them. :func:`settle` checks the payloads that landed against the ledger,
adds the published/landed/lost/duplicated counts to a :class:`Tally` and fails the test unless
every published message landed exactly once (or, given the receivers' count of possible
duplicates, at least once with exactly those extra rows). A test whose connection holder is
killed while QoS 1 and QoS 2 traffic flows checks with :func:`settle_per_qos` instead, one
ledger per QoS: QoS 2 exactly once; QoS 1 at least once, every extra copy a broker resend
(DUP=1) of a message whose acknowledgement was in flight at the kill (docs/delivery.md).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devtools.fault_proxy import FaultProxy
from tests.support.ids import unique_id
from tests.support.publishing import Message, Publisher

PUBLISH_TIMEOUT = 60.0
PAYLOAD_PAD = 48
"""Filler after the id, so payloads are not trivially small."""


# ---------------------------------------------------------------------------- the ledger


def payload(tag: str, number: int) -> bytes:
    """A unique payload: ``<tag>-<number>`` and filler; the id is what the check counts."""
    return f"{tag}-{number:08d}|".encode() + b"x" * PAYLOAD_PAD


def payload_id(data: bytes) -> str:
    return data.split(b"|", 1)[0].decode(errors="replace")


def payload_number(ident: str) -> int:
    """The number in a payload id (``<tag>-<number>``)."""
    return int(ident.rsplit("-", 1)[1])


@dataclass
class Verdict:
    """A Delta table checked against a ledger."""

    published: int
    landed: int
    lost: list[str]
    duplicated: list[str]
    unexpected: list[str]
    extra: int = 0
    """Rows beyond the first of each duplicated id."""

    def problems(self) -> str:
        return (
            f"{self.published} published, {self.landed} landed; lost {len(self.lost)} "
            f"(e.g. {self.lost[:8]}), duplicated {len(self.duplicated)} "
            f"(e.g. {self.duplicated[:8]}), unexpected {len(self.unexpected)} "
            f"(e.g. {self.unexpected[:8]})"
        )

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    @property
    def at_least_once(self) -> bool:
        return not (self.lost or self.unexpected)


@dataclass
class Ledger:
    """Payload ids the broker acknowledged to our publishers (so it had every one of them),
    and ids published while the broker kept nothing for the query (a documented gap)."""

    published: list[str] = field(default_factory=list)
    gap: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, ids: Iterable[str]) -> None:
        with self.lock:
            self.published.extend(ids)

    def check(self, landed_payloads: Sequence[bytes]) -> Verdict:
        """Every published id exactly once, nothing else (gap ids must not appear either:
        the broker had dropped them, so a row for one would be invented)."""
        counts = Counter(payload_id(p) for p in landed_payloads)
        with self.lock:
            published = list(self.published)
        wanted = set(published)
        assert len(wanted) == len(published), "the ledger holds an id twice"
        return Verdict(
            published=len(published),
            landed=sum(1 for i in wanted if counts.get(i)),
            lost=sorted(wanted - set(counts)),
            duplicated=sorted(i for i, n in counts.items() if n > 1 and i in wanted),
            unexpected=sorted(i for i in counts if i not in wanted),
            extra=sum(n - 1 for i, n in counts.items() if n > 1 and i in wanted),
        )


# ---------------------------------------------------------------------------- traffic


def qos_of(number: int) -> int:
    """Traffic alternates QoS 1 and QoS 2 (the subscription is QoS 2)."""
    return 1 + number % 2


def ledgers_per_qos(ledger: Ledger) -> dict[int, Ledger]:
    """The ledger of :class:`LedgerPublisher` traffic split by the QoS each message was sent
    with, for :func:`settle_per_qos`."""
    split = {qos: Ledger() for qos in (1, 2)}
    with ledger.lock:
        for ident in ledger.published:
            split[qos_of(payload_number(ident))].published.append(ident)
        for ident in ledger.gap:
            split[qos_of(payload_number(ident))].gap.append(ident)
    return split


class LedgerPublisher:
    """Publishes numbered payloads on ``topic`` (QoS alternating 1 and 2) and records each in
    the ledger once the broker has acknowledged it (PUBACK / PUBCOMP)."""

    def __init__(self, host: str, port: int, topic: str, ledger: Ledger, tag: str = "") -> None:
        self.topic = topic
        self.ledger = ledger
        self.tag = tag or f"p{uuid.uuid4().hex[:6]}"
        self.next_number = 0
        self.publisher = Publisher(host, port, client_id=unique_id("chaos-pub-"))

    def publish(self, count: int, *, rate: float | None = None) -> list[str]:
        """Publish ``count`` messages (at about ``rate`` per second when given) and wait
        until the broker has acknowledged each; returns their ids."""
        first = self.publisher.sent
        began = time.monotonic()
        for index in range(count):
            if rate is not None:
                pause = began + index / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the load, not waiting for a condition
            number = self.next_number
            self.next_number += 1
            self.publisher.send(Message(self.topic, payload(self.tag, number), qos_of(number)))
        sent = self.publisher.confirm(first, PUBLISH_TIMEOUT)
        ids = [payload_id(message.payload) for message in sent]
        self.ledger.record(ids)
        return ids

    def close(self) -> None:
        self.publisher.disconnect()


class BackgroundTraffic(threading.Thread):
    """A :class:`LedgerPublisher` sending ``count`` messages at ``rate`` per second in the
    background, in chunks, so faults land while messages flow."""

    def __init__(
        self, publisher: LedgerPublisher, count: int, rate: float, chunk: int = 20
    ) -> None:
        super().__init__(daemon=True, name="chaos-traffic")
        self.publisher = publisher
        self.count = count
        self.rate = rate
        self.chunk = chunk
        self.sent = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        """End after the chunk being published (every message sent is still acknowledged)."""
        self._halt.set()

    def run(self) -> None:
        try:
            while self.sent < self.count and not self._halt.is_set():
                n = min(self.chunk, self.count - self.sent)
                self.publisher.publish(n, rate=self.rate)
                self.sent += n
        except BaseException as exc:  # reported by finish()
            self.error = exc

    @property
    def done(self) -> bool:
        return not self.is_alive()

    def finish(self, timeout: float = 300.0) -> None:
        self.join(timeout)
        assert not self.is_alive(), f"traffic did not finish ({self.sent}/{self.count} sent)"
        if self.error is not None:
            raise self.error


# ---------------------------------------------------------------------------- the check


COUNTERS = (
    "kills_survived",
    "driver_kills",
    "source_process_kills",
    "broker_restarts",
    "broker_hard_kills",
    "sessions_dropped",
    "connection_cuts",
    "stalls",
    "fragments",
    "malformed_frames_sent",
    "no_connack_connections",
    "keepalive_detections",
    "disk_full_faults",
    "read_only_faults",
    "fuzz_inputs_tried",
    "bad_options_refused",
    "bad_payloads_dead_lettered",
    "messages_published",
    "messages_landed",
    "messages_lost",
    "messages_duplicated",
    "qos1_published",
    "qos1_lost",
    "qos1_extra_rows",
    "qos2_published",
    "qos2_lost",
    "qos2_extra_rows",
    "sink_kills",
    "sink_rows",
    "sink_rows_again",
    "tests_passed",
    "tests_failed",
)


class Tally:
    """Counters of one test run (all chaos tests add to the chaos run's one; ``make chaos``
    writes it to ``bench/results/chaos.json``)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.started = time.monotonic()

    def add(self, name: str, amount: int = 1) -> None:
        if name not in self.counts:
            raise KeyError(f"unknown chaos counter {name!r}")
        self.counts[name] += amount

    def add_proxy(self, proxy: FaultProxy) -> None:
        stats = proxy.stats
        self.add("connection_cuts", stats.cuts)
        self.add("stalls", stats.stalls)
        self.add("fragments", stats.fragments)
        self.add("malformed_frames_sent", stats.malformed_frames)
        self.add("no_connack_connections", stats.blackholed)

    def add_verdict(self, verdict: Verdict) -> None:
        self.add("messages_published", verdict.published)
        self.add("messages_landed", verdict.landed)
        self.add("messages_lost", len(verdict.lost))
        self.add("messages_duplicated", len(verdict.duplicated))


def settle(
    tally: Tally,
    ledger: Ledger,
    landed_payloads: list[bytes],
    possible_duplicates: int | None = None,
) -> Verdict:
    """Check the table's payloads against the ledger, count, and fail unless exactly once;
    or, given the receivers' ``possible_duplicates`` (QoS 1 resends after a dropped
    connection, docs/delivery.md), unless nothing is lost and the extra rows are those."""
    verdict = ledger.check(landed_payloads)
    tally.add_verdict(verdict)
    assert verdict.published > 0, "nothing was published"
    if possible_duplicates is None:
        assert verdict.exactly_once, verdict.problems()
    else:
        assert verdict.at_least_once, verdict.problems()
        assert verdict.extra == possible_duplicates, (
            f"{verdict.extra} extra rows, {possible_duplicates} counted: {verdict.problems()}"
        )
    return verdict


def settle_per_qos(
    tally: Tally, ledgers: Mapping[int, Ledger], rows: Sequence[Mapping[str, Any]]
) -> dict[int, Verdict]:
    """Check the rows (``payload``, ``qos``, ``duplicate``) of each QoS against that QoS's
    ledger and add them to the tally: QoS 2 exactly once; QoS 1 at least once, a message stored
    more than once only as broker resends (a first delivery, DUP=0, at most once)."""
    verdicts = {}
    for qos, ledger in sorted(ledgers.items()):
        mine = [row for row in rows if row["qos"] == qos]
        landed = [bytes(row["payload"]) for row in mine]
        resends: int | None = None
        if qos == 1:
            first = ledger.check([bytes(r["payload"]) for r in mine if not r["duplicate"]])
            assert not first.duplicated, f"QoS 1 first deliveries stored twice: {first.problems()}"
            resends = sum(1 for row in mine if row["duplicate"]) - len(first.lost)
        verdict = ledger.check(landed)
        if qos in (1, 2):
            tally.add(f"qos{qos}_published", verdict.published)
            tally.add(f"qos{qos}_lost", len(verdict.lost))
            tally.add(f"qos{qos}_extra_rows", verdict.extra)
        verdicts[qos] = settle(tally, ledger, landed, resends)
    others = sorted({row["qos"] for row in rows} - set(ledgers))
    assert not others, f"rows at a QoS nobody published with: {others}"
    return verdicts


def describe(verdicts: Mapping[int, Verdict]) -> str:
    """One line of figures per QoS: published, rows, lost, extra copies."""
    return "; ".join(
        f"QoS {qos}: {v.published} published, {v.landed + v.extra} rows, lost {len(v.lost)}, "
        f"duplicated {len(v.duplicated)} ({v.extra} extra rows)"
        for qos, v in sorted(verdicts.items())
    )
