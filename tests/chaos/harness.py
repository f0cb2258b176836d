"""What every chaos test shares: the run's size and seed, numbered traffic, the ledger of what
was published, and the final check of a Delta table against that ledger.

Knobs (environment):

* ``CHAOS_SCALE``: ``ci`` (default; small, a few minutes in all) or ``long`` (``make chaos``);
* ``CHAOS_SEED``: replay a run; each test derives its own random stream from it and its name.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tests.mqtt_clients import PahoClient

SCALES = ("ci", "long")
PUBLISH_TIMEOUT = 60.0
PAYLOAD_PAD = 48
"""Filler after the id, so payloads are not trivially small."""


def scale() -> str:
    value = os.environ.get("CHAOS_SCALE", "ci").strip().lower() or "ci"
    if value not in SCALES:
        raise ValueError(f"CHAOS_SCALE must be one of {SCALES}, got {value!r}")
    return value


def sized(ci: int, long: int) -> int:
    """``ci`` or ``long`` by ``CHAOS_SCALE``."""
    return long if scale() == "long" else ci


def run_seed() -> int:
    """The run's seed: ``CHAOS_SEED`` when set, else a fresh one (printed by each test)."""
    raw = os.environ.get("CHAOS_SEED")
    if raw:
        return int(raw)
    global _SEED
    if _SEED is None:
        _SEED = random.SystemRandom().randrange(1, 2**31)
    return _SEED


_SEED: int | None = None


def rng_for(test_name: str) -> random.Random:
    """A random stream for one test, fixed by the run's seed and the test's name."""
    return random.Random(f"{run_seed()}:{test_name}")


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
    """The ledger of :class:`Publisher` traffic split by the QoS each message was sent with,
    for :func:`tests.chaos.tally.settle_per_qos`."""
    split = {qos: Ledger() for qos in (1, 2)}
    with ledger.lock:
        for ident in ledger.published:
            split[qos_of(payload_number(ident))].published.append(ident)
        for ident in ledger.gap:
            split[qos_of(payload_number(ident))].gap.append(ident)
    return split


class Publisher:
    """Publishes numbered payloads on ``topic`` with paho (QoS alternating 1 and 2) and
    records each in the ledger once the broker has acknowledged it (PUBACK / PUBCOMP)."""

    def __init__(self, host: str, port: int, topic: str, ledger: Ledger, tag: str = "") -> None:
        self.topic = topic
        self.ledger = ledger
        self.tag = tag or f"p{uuid.uuid4().hex[:6]}"
        self.next_number = 0
        self.client = PahoClient(f"chaos-pub-{uuid.uuid4().hex[:10]}")
        outcome = self.client.connect(host, port)
        assert outcome.accepted, f"publisher refused by {host}:{port}: {outcome}"

    def publish(self, count: int, *, rate: float | None = None) -> list[str]:
        """Publish ``count`` messages (at about ``rate`` per second when given) and wait
        until the broker has acknowledged each; returns their ids."""
        pending = []
        began = time.monotonic()
        for index in range(count):
            if rate is not None:
                pause = began + index / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # pacing the load, not waiting for a condition
            number = self.next_number
            self.next_number += 1
            data = payload(self.tag, number)
            info = self.client.client.publish(self.topic, data, qos=qos_of(number))
            pending.append((payload_id(data), info))
        ids = []
        for ident, info in pending:
            info.wait_for_publish(PUBLISH_TIMEOUT)
            assert info.is_published(), f"the broker did not acknowledge {ident}"
            ids.append(ident)
        self.ledger.record(ids)
        return ids

    def close(self) -> None:
        self.client.disconnect()


class BackgroundTraffic(threading.Thread):
    """A :class:`Publisher` sending ``count`` messages at ``rate`` per second in the
    background, in chunks, so faults land while messages flow."""

    def __init__(self, publisher: Publisher, count: int, rate: float, chunk: int = 20) -> None:
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
