"""Sparkplug B edge nodes written by others, read by our decoder (connector.sparkplug).

Two peers, both installed by `make setup` (`interop-brokers`):

* ``tahu-js``: Eclipse Tahu's JavaScript client, npm ``sparkplug-client`` with
  ``sparkplug-payload`` (tools/sparkplug-edge/edge-node.js): every datatype that library encodes
  (1-19; it has no array types), DATA metrics by alias (it always writes their datatype too).
* ``tahu-java``: Eclipse Tahu's Java edge library, ``org.eclipse.tahu:tahu-edge-compat``
  (tools/tahu-edge's TahuEdgeNode drives its EdgeClient with aliases on): every datatype 1-19
  and the arrays 22-34; its DATA metrics carry an alias only, no name and no datatype.

Each peer connects to a Mosquitto on 127.0.0.1, publishes NBIRTH, DBIRTH, two NDATA, two DDATA
and ends with NDEATH (and DDEATH for Tahu Java), and prints as JSON what it sent. A paho-mqtt
client subscribed to ``spBv1.0/#`` before the peer starts keeps every message in arrival order
with its receive time. The messages go through ``decode_messages`` with a fresh state, and:

* every row has no ``reason``; every DATA metric resolved, from its alias, to the name and
  datatype its birth gave; NDEATH matched the session's bdSeq;
* every value the peer sent is in the column of its datatype, and no other value column is set
  (signed integers negative, UInt64 up to 2^64 - 1, DateTime in microseconds, arrays as lists,
  DataSet and Template as their JSON);
* each payload decoded by pysparkplug's protobuf classes (the oracle,
  devtools/sparkplug_payloads.py) has the same seq, timestamp, and per metric the same name,
  alias, datatype, flags, value field and raw value as our reader's; DATA metrics carry no name.

Tahu Java sends Template instances in DATA with members that carry no datatype (Sparkplug 3.0
allows it): their values must still come out typed, from the birth.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from connector.sparkplug.messages import Message, decode_messages
from connector.sparkplug.payload import (
    DataSet,
    Metric,
    Payload,
    Template,
    decode_message,
    value_of,
)
from connector.sparkplug.rows import VALUE_COLUMNS, Rows
from connector.sparkplug.state import SparkplugState
from devtools import REPO_ROOT
from devtools.sparkplug_payloads import pb
from devtools.system_tools import which
from tests.support.brokers import MosquittoBroker
from tests.support.paho_client import PahoClient
from tests.support.sparkplug_edge_nodes import BIN_DIRS, js_edge_node
from tests.support.waiting import wait_until

TAHU_DIR = REPO_ROOT / ".brokers" / "tahu"
TAHU_DRIVER = TAHU_DIR / "tahu-edge-node.jar"
TAHU_LOGBACK = REPO_ROOT / "tools" / "tahu-edge" / "logback.xml"
PEER_TIMEOUT = 90.0
"""Seconds a peer may take from start to exit (a JVM's start, Tahu's 1 s pause at disconnect)."""
DELIVERY_TIMEOUT = 20.0
GROUP = "interop"
DEVICE = "device1"


# ---------------------------------------------------------------------------- the peers


def tahu_js_command(port: int, node: str) -> list[str]:
    """The JavaScript edge node's command line; skips when Node or the package is missing."""
    return [
        *js_edge_node("edge-node.js"),
        str(port),
        *("--group", GROUP, "--node", node, "--device", DEVICE),
    ]


def tahu_java_command(port: int, node: str) -> list[str]:
    """The Java edge node's command line; skips when Java or the built jars are missing."""
    java = which("java", BIN_DIRS)
    if java is None:
        pytest.skip("the Tahu Java edge node needs Java, and no `java` was found")
    jars = sorted(TAHU_DIR.glob("tahu-edge-compat-*.jar"))
    if not jars or not TAHU_DRIVER.is_file():
        pytest.skip(
            f"tahu-edge-compat or tools/tahu-edge is not built in {TAHU_DIR}: run `make setup`"
        )
    return [
        java,
        f"-Dlogback.configurationFile={TAHU_LOGBACK}",
        "-cp",
        os.pathsep.join([str(jars[-1]), str(TAHU_DRIVER)]),
        "mqtt.lakehouse.tahuedge.TahuEdgeNode",
        str(port),
        *("--group", GROUP, "--node", node, "--device", DEVICE),
    ]


@dataclass(frozen=True)
class Peer:
    """An edge node program: its command line for a broker port and an edge node id."""

    name: str
    command: Callable[[int, str], list[str]]
    deaths: tuple[str, ...]
    """The death messages it publishes as it stops, in order."""


PEERS = (
    Peer("tahu-js", tahu_js_command, ("NDEATH",)),
    Peer("tahu-java", tahu_java_command, ("DDEATH", "NDEATH")),
)


# ---------------------------------------------------------------------------- receiving


class Recorder:
    """paho's ``on_message``: every message, in arrival order, with its receive time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[Message] = []

    def on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        received_us = time.time_ns() // 1000
        with self._lock:
            self._messages.append(
                Message(
                    message.topic,
                    bytes(message.payload),
                    message.qos,
                    received_us,
                    len(self._messages),
                )
            )

    @property
    def messages(self) -> list[Message]:
        with self._lock:
            return list(self._messages)


def run_peer(peer: Peer, broker: MosquittoBroker) -> tuple[dict[str, Any], list[Message]]:
    """Run ``peer`` against ``broker`` with a subscriber listening from before its start;
    its report (the JSON it printed) and every Sparkplug message received, up to its NDEATH."""
    node = f"{peer.name}-{os.getpid()}"
    command = peer.command(broker.port, node)
    recorder = Recorder()
    subscriber = PahoClient(f"sparkplug-host-{os.getpid()}")
    try:
        subscriber.client.on_message = recorder.on_message
        assert subscriber.connect(broker.host, broker.port).accepted
        subscriber.subscribe("spBv1.0/#", qos=1)
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PEER_TIMEOUT, check=False
        )
        assert done.returncode == 0, (
            f"{peer.name} exited with {done.returncode}\nstdout:\n{done.stdout}\n"
            f"stderr:\n{done.stderr[-5000:]}"
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == 1, f"{peer.name} printed no single JSON report:\n{done.stdout}"
        report: dict[str, Any] = json.loads(lines[0])
        death = f"spBv1.0/{GROUP}/NDEATH/{node}"
        wait_until(
            lambda: any(m.topic == death for m in recorder.messages),
            DELIVERY_TIMEOUT,
            message=lambda: f"no {death}; got {[m.topic for m in recorder.messages]}",
        )
    finally:
        subscriber.close()
    assert (report["group_id"], report["edge_node_id"], report["device_id"]) == (
        GROUP,
        node,
        DEVICE,
    )
    return report, recorder.messages


# ---------------------------------------------------------------------------- expectations


def f32(value: float) -> float:
    """``value`` rounded to a 32-bit float, as a Float metric carries it."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


INTEGER_TYPES = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32")
STRING_TYPES = ("String", "Text", "UUID")
INTEGER_ARRAYS = (
    "Int8Array",
    "Int16Array",
    "Int32Array",
    "Int64Array",
    "UInt8Array",
    "UInt16Array",
    "UInt32Array",
)


def expected_cell(datatype: str, value: Any) -> Any:
    """A value as the decoder's JSON of a data set cell, template parameter or member has it."""
    if value is None:
        return None
    if datatype in (*INTEGER_TYPES, "UInt64", "DateTime"):
        return int(value)
    if datatype == "Float":
        return f32(value)
    if datatype == "Double":
        return float(value)
    return value


def expected_dataset(value: dict[str, Any]) -> dict[str, Any]:
    types = value["types"]
    return {
        "columns": value["columns"],
        "types": types,
        "rows": [
            [expected_cell(types[i], cell) for i, cell in enumerate(row)] for row in value["rows"]
        ],
    }


def expected_template(value: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": value.get("version"),
        "template_ref": value.get("template_ref", value.get("templateRef")),
        "is_definition": value.get("is_definition", value.get("isDefinition")),
        "parameters": [
            {"name": p["name"], "type": p["type"], "value": expected_cell(p["type"], p["value"])}
            for p in value["parameters"]
        ],
        "metrics": [
            {
                "name": m["name"],
                "datatype": m.get("datatype", m.get("type")),
                "value": expected_cell(m.get("datatype", m.get("type")), m["value"]),
            }
            for m in value["metrics"]
        ],
    }


def decoded_template(text: str) -> dict[str, Any]:
    """The decoder's template JSON, cut to what the peers report."""
    value = json.loads(text)
    return {
        "version": value["version"],
        "template_ref": value["template_ref"],
        "is_definition": value["is_definition"],
        "parameters": value["parameters"],
        "metrics": [
            {"name": m["name"], "datatype": m["datatype"], "value": m["value"]}
            for m in value["metrics"]
        ],
    }


def expected_column(datatype: str, value: Any) -> tuple[str, Any]:
    """The value column a metric of ``datatype`` must fill, and its value there."""
    if datatype in INTEGER_TYPES:
        return "long_value", int(value)
    if datatype == "UInt64":
        return "ulong_value", int(value)
    if datatype == "DateTime":
        return "datetime_value", int(value) * 1000
    if datatype == "Float":
        return "double_value", f32(value)
    if datatype == "Double":
        return "double_value", float(value)
    if datatype == "Boolean":
        return "boolean_value", value
    if datatype in STRING_TYPES:
        return "string_value", value
    if datatype in ("Bytes", "File"):
        return "bytes_value", bytes.fromhex(value["hex"])
    if datatype == "DataSet":
        return "dataset_value", expected_dataset(value)
    if datatype == "Template":
        return "template_value", expected_template(value)
    if datatype in INTEGER_ARRAYS:
        return "long_array", [int(v) for v in value]
    if datatype == "UInt64Array":
        return "ulong_array", [int(v) for v in value]
    if datatype == "FloatArray":
        return "double_array", [f32(v) for v in value]
    if datatype == "DoubleArray":
        return "double_array", [float(v) for v in value]
    if datatype == "BooleanArray":
        return "boolean_array", value
    if datatype == "StringArray":
        return "string_array", value
    if datatype == "DateTimeArray":
        return "datetime_array", [int(v) * 1000 for v in value]
    raise AssertionError(f"the peer reported a datatype this test does not know: {datatype}")


def same(got: Any, want: Any) -> bool:
    """Equality that never takes a bool for an int (True == 1 in Python)."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    return bool(got == want)


# ---------------------------------------------------------------------------- the checks


def row_indexes(rows: Rows, offset: int) -> list[int]:
    """The row numbers of the message at ``offset``, in metric order."""
    return [i for i, o in enumerate(rows.columns["offset"]) if o == offset]


def check_values(
    report: dict[str, Any], messages: list[Message], rows: Rows
) -> tuple[list[str], int]:
    """Every reported metric against its row: the mismatches and the number of metrics
    checked."""
    cols = rows.columns
    reported = report["messages"]
    received = [
        m for m in messages if m.topic.split("/")[2] in ("NBIRTH", "DBIRTH", "NDATA", "DDATA")
    ]
    kinds = [(m.topic.split("/")[2], [*m.topic.split("/"), None][4]) for m in received]
    assert kinds == [(r["message_type"], r["device_id"]) for r in reported], (
        "the messages received are not the ones the peer says it published, in order"
    )
    problems: list[str] = []
    checked = 0
    for sent, message in zip(reported, received, strict=True):
        indexes = row_indexes(rows, message.offset)
        assert len(indexes) >= len(sent["metrics"]), f"{message.topic}: fewer rows than metrics"
        for position, metric in enumerate(sent["metrics"]):
            i = indexes[position]
            where = f"{sent['message_type']} {metric['name']!r} (alias {metric['alias']})"
            checked += 1
            for column, want in (
                ("metric_index", position),
                ("alias", metric["alias"]),
                ("metric_name", metric["name"]),
                ("datatype", metric["datatype"]),
                ("reason", None),
            ):
                if cols[column][i] != want:
                    problems.append(f"{where}: {column} is {cols[column][i]!r}, not {want!r}")
            column, want = expected_column(metric["datatype"], metric["value"])
            got = cols[column][i]
            if column == "dataset_value" and got is not None:
                got = json.loads(got)
            elif column == "template_value" and got is not None:
                got = decoded_template(got)
            if not same(got, want):
                problems.append(f"{where}: {column} is {got!r}, not {want!r}")
            for other in VALUE_COLUMNS:
                if other != column and cols[other][i] is not None:
                    problems.append(f"{where}: {other} is set too ({cols[other][i]!r})")
    return problems, checked


def check_rows(peer: Peer, messages: list[Message], rows: Rows) -> None:
    """What must hold of every row, whatever the values: no reason, the session's bdSeq,
    NDEATH matched, no gap in seq."""
    cols = rows.columns
    trouble = [
        f"row {i} ({cols['message_type'][i]} {cols['metric_name'][i]!r}): {cols['reason'][i]}"
        for i in range(len(rows))
        if cols["reason"][i] is not None
    ]
    assert not trouble, "rows with a reason:\n" + "\n".join(trouble)
    types = [m.topic.split("/")[2] for m in messages]
    assert types == ["NBIRTH", "DBIRTH", "NDATA", "DDATA", "NDATA", "DDATA", *peer.deaths]
    assert set(cols["bd_seq"]) == {0}
    assert not any(cols["seq_gap"])
    deaths = [i for i in range(len(rows)) if cols["message_type"][i] == "NDEATH"]
    assert deaths and all(cols["death_matched"][i] is True for i in deaths)
    # bdSeq: Int64 from Tahu Java (long_value), UInt64 from Tahu JavaScript (ulong_value)
    bd_seqs = [
        (cols["datatype"][i], cols["long_value"][i], cols["ulong_value"][i])
        for i in range(len(rows))
        if cols["message_type"][i] in ("NBIRTH", "NDEATH") and cols["metric_name"][i] == "bdSeq"
    ]
    assert bd_seqs and all(
        (kind, long, ulong) in (("Int64", 0, None), ("UInt64", None, 0))
        for kind, long, ulong in bd_seqs
    ), bd_seqs
    data = [i for i in range(len(rows)) if cols["message_type"][i] in ("NDATA", "DDATA")]
    assert data and all(cols["alias"][i] is not None for i in data)


# ---------------------------------------------------------------------------- the oracle


def optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


def compare_metric(ours: Metric, theirs: Any, where: str) -> list[str]:
    """Our reader's metric against pysparkplug's: names, aliases, datatypes, flags, the value's
    field and raw value."""
    problems = []
    for name, mine in (
        ("name", optional(ours, "name")),
        ("alias", optional(ours, "alias")),
        ("datatype", optional(ours, "datatype")),
        ("timestamp", optional(ours, "timestamp")),
    ):
        if mine != optional(theirs, name):
            problems.append(
                f"{where}.{name}: ours {mine!r}, pysparkplug {optional(theirs, name)!r}"
            )
    for flag in ("is_historical", "is_transient", "is_null"):
        if getattr(ours, flag) != getattr(theirs, flag):
            problems.append(f"{where}.{flag} differs")
    field = theirs.WhichOneof("value")
    if ours.WhichOneof("value") != field:
        problems.append(f"{where}: value in {ours.WhichOneof('value')}, pysparkplug says {field}")
        return problems
    if field is None:
        return problems
    raw: Any = value_of(ours)
    want: Any = getattr(theirs, field)
    got: Any
    if field == "dataset_value":
        assert isinstance(raw, DataSet)
        got = (raw.num_of_columns, list(raw.columns), list(raw.types), len(raw.rows))
        want = (want.num_of_columns, list(want.columns), list(want.types), len(want.rows))
    elif field == "template_value":
        assert isinstance(raw, Template)
        got = (
            optional(raw, "version"),
            optional(raw, "template_ref"),
            raw.is_definition,
            [(optional(m, "name"), optional(m, "datatype")) for m in raw.metrics],
            [(optional(p, "name"), optional(p, "type")) for p in raw.parameters],
        )
        want = (
            optional(want, "version"),
            optional(want, "template_ref"),
            optional(want, "is_definition"),
            [(optional(m, "name"), optional(m, "datatype")) for m in want.metrics],
            [(optional(p, "name"), optional(p, "type")) for p in want.parameters],
        )
    else:
        got = raw
    if not same(got, want):
        problems.append(f"{where}.{field}: ours {got!r}, pysparkplug {want!r}")
    return problems


def check_oracle(messages: list[Message]) -> int:
    """Each payload read by us and by pysparkplug; the number of metrics compared."""
    problems: list[str] = []
    compared = 0
    for message in messages:
        ours: Payload = decode_message(message.payload)
        theirs = pb().Payload.FromString(message.payload)
        where = message.topic
        if (optional(ours, "seq"), optional(ours, "timestamp")) != (
            optional(theirs, "seq"),
            optional(theirs, "timestamp"),
        ):
            problems.append(f"{where}: seq/timestamp differ")
        if len(ours.metrics) != len(theirs.metrics):
            problems.append(
                f"{where}: {len(ours.metrics)} metrics, pysparkplug {len(theirs.metrics)}"
            )
            continue
        for i, (mine, other) in enumerate(zip(ours.metrics, theirs.metrics, strict=True)):
            problems += compare_metric(mine, other, f"{where} metrics[{i}]")
            compared += 1
        kind = message.topic.split("/")[2]
        if kind in ("NDATA", "DDATA"):
            named = [i for i, m in enumerate(theirs.metrics) if m.HasField("name")]
            if named:
                problems.append(f"{where}: DATA metrics {named} carry a name, not only an alias")
    assert not problems, "our reader and pysparkplug disagree:\n" + "\n".join(problems)
    return compared


# ---------------------------------------------------------------------------- the test


@pytest.mark.parametrize("peer", PEERS, ids=[p.name for p in PEERS])
def test_an_edge_node_of_others_decodes_whole(peer: Peer, mosquitto: MosquittoBroker) -> None:
    report, messages = run_peer(peer, mosquitto)

    compared = check_oracle(messages)
    assert compared >= 40

    rows = decode_messages(messages, SparkplugState())
    check_rows(peer, messages, rows)
    problems, checked = check_values(report, messages, rows)
    assert checked >= 40
    assert not problems, f"{len(problems)} of {checked} metrics wrong:\n" + "\n".join(problems)
