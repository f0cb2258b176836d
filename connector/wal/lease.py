"""The single writer of a WAL in a store: a lease kept without conditional writes.

``pyarrow.fs`` cannot create an object only if it is absent, so a writer claims the WAL in
two steps: it writes its own claim ``lease/<time>-<uuid>.json`` and then lists ``lease/``.
It holds the lease only when its claim is the only one; when another appeared meanwhile, it
deletes its own and retries after a random pause. On a store that lists every completed write
(S3, GCS, Azure Blob and HDFS do), two writers never both hold it: whichever listed last saw
the other's claim. A writer claims only when it sees no live claim.

Liveness: the holder rewrites its claim with a higher beat every ``ttl / 4`` seconds. A claim
whose beat did not change for ``ttl`` seconds of the observer's clock is stale and is deleted;
so is, at once, a claim of a process on this host that no longer runs (or of a closed
writer of this process, which could not delete it while the store was away). The holder stops
appending when its last renewal is older than ``2/3 ttl`` (so it has stopped before anyone may
take over) and for good once its claim is gone or a newer claim appears (it was taken over).
The broker's one connection per client id (MQTT 3.1.1 §3.1.4) is the second fence.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from .errors import WalLockedError
from .objects import ObjectStore

log = logging.getLogger(__name__)

LEASE_DIR = "lease"
DEFAULT_LEASE_SECONDS = 30.0

_held: set[str] = set()
"""Claims held by open writers of this process: another claim of this process is a leftover."""


@dataclass(frozen=True, slots=True)
class _Claim:
    name: str
    host: str
    pid: int
    beat: int
    ttl: float

    @property
    def holder(self) -> str:
        return f"pid={self.pid} host={self.host}"


class Lease:
    """A held lease; :meth:`release` it exactly once."""

    def __init__(self, store: ObjectStore, name: str, ttl: float) -> None:
        self._store = store
        self._name = name
        self._ttl = ttl
        self._beat = 0
        self._renewed_at = time.monotonic()
        self._lost: str | None = None
        _held.add(name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="wal-lease", daemon=True)
        self._thread.start()

    @classmethod
    def acquire(cls, store: ObjectStore, *, ttl: float, wait: float) -> Lease:
        """Claim the WAL, waiting at most ``wait`` seconds for a live holder to go away;
        WalLockedError naming the holder otherwise."""
        deadline = time.monotonic() + wait
        seen: dict[str, tuple[int, float]] = {}
        while True:
            live = _live_claims(store, seen)
            if not live:
                name = f"{time.time_ns():020d}-{uuid.uuid4().hex}.json"
                store.write(f"{LEASE_DIR}/{name}", _claim_body(0, ttl))
                if _claim_names(store) == [name]:
                    log.info("WAL %s: lease taken (%s)", store.location, name)
                    return cls(store, name, ttl)
                store.delete(f"{LEASE_DIR}/{name}")  # another writer claimed at the same time
                time.sleep(random.uniform(0.05, 0.5))
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise WalLockedError(store.location.text, f"lease held by {live[0].holder}")
            time.sleep(min(left, 1.0, max(ttl / 8, 0.05)))

    def check(self) -> None:
        """Raise WalLockedError unless this writer may append now."""
        if self._lost is not None:
            raise WalLockedError(self._store.location.text, self._lost)
        if time.monotonic() - self._renewed_at > self._ttl * 2 / 3:
            raise WalLockedError(
                self._store.location.text,
                f"this writer could not renew its lease for {self._ttl * 2 / 3:.0f} s "
                "(is the store reachable?); appends stop before another writer may take over",
            )

    def release(self) -> None:
        """Stop renewing and delete the claim (a lost claim is left alone)."""
        self._stop.set()
        self._thread.join()
        _held.discard(self._name)
        if self._lost is None:
            with contextlib.suppress(OSError):
                self._store.delete(f"{LEASE_DIR}/{self._name}")

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._ttl / 4):
            try:
                self._renew()
            except OSError as exc:
                log.warning("WAL %s: could not renew the lease: %s", self._store.location, exc)
            if self._lost is not None:
                log.error("WAL %s: %s; appends refused", self._store.location, self._lost)
                return

    def _renew(self) -> None:
        started = time.monotonic()
        names = _claim_names(self._store)
        if self._name not in names:
            self._lost = "this writer's lease was taken over by another writer"
            return
        if any(other > self._name for other in names):
            self._lost = "another writer claimed this WAL, judging this writer dead"
            return
        self._beat += 1
        self._store.write(f"{LEASE_DIR}/{self._name}", _claim_body(self._beat, self._ttl))
        self._renewed_at = started


def _claim_body(beat: int, ttl: float) -> bytes:
    body = {"host": socket.gethostname(), "pid": os.getpid(), "beat": beat, "ttl": ttl}
    return json.dumps(body).encode()


def _claim_names(store: ObjectStore) -> list[str]:
    return sorted(name for name, _, is_dir in store.entries(LEASE_DIR) if not is_dir)


def _read_claim(store: ObjectStore, name: str) -> _Claim | None:
    """A claim's content; None when it vanished. Unreadable content counts as a live claim
    that never beats (it goes stale after the default lease time)."""
    try:
        raw = json.loads(store.read(f"{LEASE_DIR}/{name}"))
        return _Claim(name, str(raw["host"]), int(raw["pid"]), int(raw["beat"]), float(raw["ttl"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return _Claim(name, "?", -1, -1, DEFAULT_LEASE_SECONDS)


def _live_claims(store: ObjectStore, seen: dict[str, tuple[int, float]]) -> list[_Claim]:
    """The claims still live; stale ones are deleted. ``seen`` keeps, per claim, the beat
    last seen and when it changed (this process's clock)."""
    live = []
    now = time.monotonic()
    for name in _claim_names(store):
        claim = _read_claim(store, name)
        if claim is None:
            continue
        stale = None
        here = claim.host == socket.gethostname()
        if here and claim.pid == os.getpid() and name not in _held:
            stale = "a writer of this process closed without deleting it"
        elif here and claim.pid > 0 and not _running(claim.pid):
            stale = "its process no longer runs"
        else:
            beat, since = seen.get(name, (None, now))
            if beat != claim.beat:
                seen[name] = (claim.beat, now)
            elif now - since >= claim.ttl:
                stale = f"it was not renewed for {claim.ttl:.0f} s"
        if stale is None:
            live.append(claim)
            continue
        log.warning(
            "WAL %s: removing the stale lease of %s: %s", store.location, claim.holder, stale
        )
        store.delete(f"{LEASE_DIR}/{name}")
    return live


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
