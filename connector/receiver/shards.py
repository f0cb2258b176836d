"""Several receivers for one query: who subscribes to what, where each WAL lives, and the
offsets that name a position in every shard.

With ``receivers`` = N > 1, shard i runs its own receiver process with client id
``<clientId>-<i>`` and its own WAL ``<walPath>/shard-<i>``. The load is split either by MQTT
shared subscriptions (``shardBy=share``: every shard subscribes ``$share/<group>/<filter>`` for
every filter and the broker hands each message to one member of the group) or by the filters
themselves (``shardBy=topics``: filter k goes to shard k mod N).

A Spark offset then holds one WAL position per shard, like the per-partition offsets of the
Kafka source: ``{"shards": [{"wal": <identity>, "offset": <n>}, ...]}``. With one receiver the
offset stays ``{"wal": <identity>, "offset": <n>}``, the format of earlier checkpoints. A
position may add ``"final": true`` (:class:`Position`, the rule for a replaced WAL); positions
without it are written exactly as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from connector.mqtt.topics import SHARE_PREFIX
from connector.options.source import SourceOptions
from connector.wal.location import parse_location
from connector.wal.opening import child_names, wal_identity

SHARD_DIR_PREFIX = "shard-"


class ShardLayoutError(RuntimeError):
    """A checkpoint or a WAL directory was made with a different number of receivers."""


def shard_wal_path(wal_path: str, index: int) -> str:
    """The WAL of shard ``index`` under the query's ``walPath`` (a folder or a store prefix)."""
    return parse_location(wal_path).child(f"{SHARD_DIR_PREFIX}{index}").text


def shard_topics(options: SourceOptions, index: int) -> tuple[str, ...]:
    """The filters shard ``index`` subscribes to.

    ``share``: every filter as a shared subscription ``$share/<group>/<filter>`` (MQTT 5.0
    section 4.8.2, which some brokers also accept from 3.1.1 clients: docs/brokers.md).
    ``topics``: filters ``index``, ``index + N``, ... so that each filter goes to exactly one
    shard.
    """
    if options.shard_by == "share":
        return tuple(f"{SHARE_PREFIX}{options.share_group}/{t}" for t in options.topics)
    return options.topics[index :: options.receivers]


def shard_options(options: SourceOptions, index: int) -> SourceOptions:
    """The options of shard ``index``'s receiver: one receiver, its own client id, WAL and
    filters; everything else (broker, credentials, QoS, backlog bound) as the query's."""
    if not 0 <= index < options.receivers:
        raise ValueError(f"shard {index} of {options.receivers}")
    return dataclasses.replace(
        options,
        client_id=f"{options.client_id}-{index}",
        wal_path=shard_wal_path(options.wal_path, index),
        topics=shard_topics(options, index),
        receivers=1,
    )


def drops_retained(options: SourceOptions, index: int) -> bool:
    """Whether shard ``index`` discards messages flagged retained.

    A broker may send retained messages to every subscriber when it subscribes, shared ones
    included (docs/brokers.md), so with ``share`` each shard would store its own copy. A
    3.1.1 broker sets RETAIN only on messages sent because of a new subscription (MQTT 3.1.1
    section 3.3.1.3), never on live traffic, so shard 0 keeps them and the others drop them.
    """
    return options.receivers > 1 and options.shard_by == "share" and index > 0


# ---------------------------------------------------------------------------- WAL layout


def existing_shards(wal_path: str) -> list[int]:
    """Indexes of the shard WALs present under ``wal_path``, ascending."""
    found = []
    for name in child_names(wal_path):
        suffix = name[len(SHARD_DIR_PREFIX) :]
        if (
            name.startswith(SHARD_DIR_PREFIX)
            and suffix.isdigit()
            and wal_identity(shard_wal_path(wal_path, int(suffix))) is not None
        ):
            found.append(int(suffix))
    return sorted(found)


def check_wal_layout(options: SourceOptions) -> None:
    """Refuse to start when ``walPath`` holds WALs that this number of receivers would leave
    unread: a single WAL under N > 1 receivers, shard WALs under one receiver, or shards
    beyond the N - 1th (their messages, and in ``share`` mode the broker sessions that keep
    receiving a share of the traffic, would be abandoned)."""
    shards = existing_shards(options.wal_path)
    single = wal_identity(options.wal_path) is not None
    if options.receivers == 1 and shards:
        raise ShardLayoutError(
            f"walPath {options.wal_path} holds the WALs of {max(shards) + 1} receivers "
            f"(shard-0 ...) but option 'receivers' is 1: set receivers={max(shards) + 1}, or "
            "use a new walPath, clientId and checkpoint"
        )
    if options.receivers > 1 and single:
        raise ShardLayoutError(
            f"walPath {options.wal_path} holds the WAL of a single receiver but option "
            f"'receivers' is {options.receivers}: remove option 'receivers' (or set it to 1), "
            "or use a new walPath, clientId and checkpoint"
        )
    beyond = [i for i in shards if i >= options.receivers]
    if options.receivers > 1 and beyond:
        raise ShardLayoutError(
            f"walPath {options.wal_path} holds the WALs of {max(shards) + 1} receivers but "
            f"option 'receivers' is {options.receivers}: the messages in shard-{beyond[0]} "
            "would never be read; set receivers back, or drain the query, then start with a "
            "new walPath, clientId and checkpoint"
        )


# ---------------------------------------------------------------------------- offsets


@dataclasses.dataclass(frozen=True, slots=True)
class Position:
    """A position in one shard's WAL: records below ``offset`` are consumed.

    ``final``: the WAL stored nothing past ``offset`` and its receiver stopped taking messages
    (a ``Trigger.AvailableNow`` run's end, once its receiver froze at that offset; see
    ``MqttStreamReader._freeze_at_targets``). Once the batch ending at a final
    position is committed, every message that WAL acknowledged to the broker is in the sink,
    and the broker still holds everything after (unacknowledged, MQTT 3.1.1 section 4.4). So a
    checkpoint whose position is final may go on with another WAL, from its first offset, with
    nothing lost (``MqttStreamReader._resolve``; docs/delivery.md, "The end of a
    Trigger.AvailableNow run"). A position that is not final names a WAL that may have held
    unprocessed messages: another WAL there is data loss (``failOnDataLoss``). A run that
    starts at a final position has Spark log it as not final before any receiver connects
    (``MqttStreamReader.latestOffset``), so a run that stores into a WAL and loses it leaves a
    position that is not final.
    """

    wal: str | None
    offset: int
    final: bool = False


def _encode_position(position: Position) -> dict[str, Any]:
    """One position as JSON: its WAL and offset, and ``final`` only when set."""
    entry: dict[str, Any] = {"wal": position.wal, "offset": position.offset}
    if position.final:
        entry["final"] = True
    return entry


def encode_offset(positions: Sequence[Position]) -> dict[str, Any]:
    """The Spark offset of ``positions`` (one per shard): one shard's position alone, more
    shards as a ``shards`` list (:func:`decode_offset` reads both)."""
    if len(positions) == 1:
        return _encode_position(positions[0])
    return {"shards": [_encode_position(p) for p in positions]}


def decode_offset(offset: Mapping[str, Any], receivers: int) -> list[Position]:
    """The per-shard positions of a Spark offset, refusing one made with another number of
    receivers (its positions belong to other WALs and other broker sessions)."""
    if "shards" in offset:
        entries = offset["shards"]
        if not isinstance(entries, list) or not entries:
            raise ShardLayoutError(f"malformed mqtt source offset {offset!r}")
    else:
        entries = [offset]
    if len(entries) != receivers:
        raise ShardLayoutError(
            f"the checkpoint's offsets were written by a query with {len(entries)} "
            f"receiver(s) but option 'receivers' is {receivers}: every receiver has its own WAL "
            f"and broker session, so the count cannot change within a checkpoint. Set "
            f"receivers={len(entries)}, or let the query drain (Trigger.AvailableNow) and start "
            "again with a new checkpoint, walPath and clientId"
        )
    return [
        Position(e.get("wal"), int(e.get("offset", 0)), e.get("final") is True) for e in entries
    ]


def fair_split(available: Sequence[int], budget: int) -> list[int]:
    """Max-min fair shares of ``budget`` records over shards with ``available`` records each:
    every shard gets an equal share, and what a shard cannot use goes to the others."""
    take = [0] * len(available)
    left = max(0, budget)
    hungry = [i for i, a in enumerate(available) if a > 0]
    while left > 0 and hungry:
        share = max(1, left // len(hungry))
        for i in list(hungry):
            give = min(share, available[i] - take[i], left)
            take[i] += give
            left -= give
            if take[i] >= available[i]:
                hungry.remove(i)
            if left == 0:
                break
    return take
