"""Fuzz target: the Sparkplug B payload reader and the rows made from what it reads.

Input layout: byte 0 picks the message's type (its low 3 bits: NBIRTH, NDATA, DBIRTH, DDATA,
NDEATH, DDEATH, NCMD, STATE) and whether a valid NBIRTH and DBIRTH come first (bit 3); the rest
is the payload.

Invariants:

* :func:`decode_message` raises only :class:`PayloadError`, whose message says what and where;
* :func:`decode_messages` never raises: any bytes make at least one row, and a payload that
  does not decode keeps its bytes and a reason;
* the rows convert to the Spark source's Arrow schema (a bad value never fails a batch), and
  their JSON columns are strict JSON (no NaN);
* :func:`fold` leaves the same state as :func:`decode_messages` (the planner and the readers of
  a batch agree).
"""

from __future__ import annotations

import json

from connector.spark.reader.sparkplug_schema import to_record_batch
from connector.sparkplug.messages import Message, decode_messages, fold
from connector.sparkplug.payload import PayloadError, decode_message
from connector.sparkplug.state import SparkplugState
from devtools.sparkplug_payloads import birth, data, death, payload, rich_payload

TOPICS = (
    "spBv1.0/g/NBIRTH/n",
    "spBv1.0/g/NDATA/n",
    "spBv1.0/g/DBIRTH/n/d",
    "spBv1.0/g/DDATA/n/d",
    "spBv1.0/g/NDEATH/n",
    "spBv1.0/g/DDEATH/n/d",
    "spBv1.0/g/NCMD/n",
    "spBv1.0/STATE/host",
)

_BIRTHS: list[Message] = []


def _births() -> list[Message]:
    if not _BIRTHS:
        node = birth([("t", 1, 3, "int_value", 5), ("s", 2, 12, "string_value", "x")], bd_seq=0)
        device = birth([("d", 3, 10, "double_value", 1.5)], bd_seq=-1, seq=1)
        _BIRTHS.extend(
            [
                Message(TOPICS[0], node, 0, 1_000, 0),
                Message(TOPICS[2], device, 0, 2_000, 1),
            ]
        )
    return _BIRTHS


def one_input(data_: bytes) -> None:
    if not data_:
        return
    topic = TOPICS[data_[0] & 7]
    body = data_[1:]
    failed = False
    try:
        decode_message(body, limit=1 << 16)
    except PayloadError as exc:
        assert str(exc), "a PayloadError without a message"
        failed = True
    prefix = _births() if data_[0] & 8 else []
    messages = [*prefix, Message(topic, body, 0, 3_000, len(prefix))]
    decoded = SparkplugState(reorder_timeout_us=1)
    rows = decode_messages(messages, decoded, limit=1 << 16)
    assert len(rows) >= 1 + len(prefix)
    last = rows.columns["offset"].index(len(prefix))
    if failed and "STATE" not in topic:
        assert rows.columns["reason"][last], "an undecodable payload without a reason"
        assert rows.columns["payload"][last] == body, "an undecodable payload lost its bytes"
    for column in ("dataset_value", "template_value", "properties"):
        for text in rows.columns[column]:
            if text is not None:
                json.loads(text, parse_constant=_not_json)
    batch = to_record_batch(rows)
    assert batch.num_rows == len(rows)
    folded = SparkplugState(reorder_timeout_us=1)
    fold(messages, folded, limit=1 << 16)
    assert folded.to_json() == decoded.to_json(), "fold and decode_messages disagree"


def _not_json(name: str) -> None:
    raise AssertionError(f"{name} in a JSON column: not JSON")


def seeds() -> list[bytes]:
    """Births, deaths, alias-only data and a payload that sets every field, behind each type
    byte with and without the births first."""
    bodies = [
        birth([("t", 1, 3, "int_value", 5)], bd_seq=0),
        data([(1, "int_value", 4294967295), (2, "string_value", "y")], seq=2),
        data([(3, "double_value", 2.5)], seq=3),
        death(0),
        rich_payload(),
        payload([{"name": "bools", "datatype": 32, "bytes_value": b"\x03\x00\x00\x00\xa0"}]),
        payload([{"name": "dt", "datatype": 13, "long_value": 2**64 - 1}], seq=4),
        b'{"online": true, "timestamp": 1}',
        b"",
    ]
    return [bytes([kind]) + body for body in bodies for kind in (1, 9, 3, 11, 0, 4)]
