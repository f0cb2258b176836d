"""The receiver as a Sparkplug host that joins late, against an edge node written by others
(Eclipse Tahu's JavaScript client, tools/sparkplug-edge/rebirth-node.js): the node's NBIRTH went
out before the host connected, so its alias-only DATA cannot be resolved; the host asks for a
rebirth (NCMD ``Node Control/Rebirth``), the node answers with a new NBIRTH, and every DATA
stored after it resolves. One request only, however many DATA came before the birth."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from connector.sparkplug.messages import decode_messages, messages_of
from connector.sparkplug.state import SparkplugState
from connector.wal import WalReader
from tests.support.brokers import MosquittoBroker
from tests.support.paho_client import PahoClient
from tests.support.sparkplug_edge_nodes import js_edge_node
from tests.support.waiting import wait_until

TIMEOUT = 60.0
GROUP = "interop"


def _node_command(port: int, node: str) -> list[str]:
    return [
        *js_edge_node("rebirth-node.js"),
        str(port),
        *("--group", GROUP, "--node", node, "--count", "60", "--every", "100"),
    ]


def test_a_late_host_asks_for_a_rebirth_and_resolves_what_follows(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    node = f"rebirth-{os.getpid()}"
    command = _node_command(mosquitto.port, node)
    nbirth = f"spBv1.0/{GROUP}/NBIRTH/{node}"
    watcher = PahoClient("watch-nbirth")
    assert watcher.connect(mosquitto.host, mosquitto.port).accepted
    watcher.subscribe(nbirth, 0)
    edge = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    receiver = None
    try:
        watcher.wait_for_messages(1, timeout=TIMEOUT)  # its first NBIRTH: the host missed it
        receiver = Receiver(
            SourceOptions.parse(
                {
                    "brokerUrl": mosquitto.url,
                    "topic": f"spBv1.0/{GROUP}/#",
                    "qos": "0",
                    "clientId": "late-host",
                    "walPath": str(tmp_path / "wal"),
                    "payloadFormat": "sparkplug",
                    "sparkplugHostId": "late-host",
                    "sparkplugRebirthInterval": "3600",
                }
            )
        )
        receiver.start()
        out, err = edge.communicate(timeout=TIMEOUT)
        assert edge.returncode == 0, f"the edge node exited with {edge.returncode}:\n{err}"
        ndeath = f"spBv1.0/{GROUP}/NDEATH/{node}"
        wal = tmp_path / "wal"
        wait_until(
            lambda: ndeath in WalReader(wal).read(0, receiver.wal.next_offset).topics,
            TIMEOUT,
            message="the edge node's NDEATH never reached the WAL",
        )
    finally:
        if edge.poll() is None:
            edge.kill()
        if receiver is not None:
            receiver.stop()
        watcher.disconnect()

    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    requests = [e for e in events if e["event"] == "rebirth-request"]
    assert len(requests) == 1 and requests[0]["rebirth"] is True, events
    assert [e["event"] for e in events].count("nbirth") == 2, events

    reader = WalReader(wal)
    end = reader.first_offset() or 0
    columns = reader.read(end, receiver.wal.next_offset)
    stored = messages_of(columns.topics, columns.payloads, columns.qos, columns.timestamps_us, 0)
    rows = decode_messages(stored, SparkplugState())
    cols = rows.columns
    topics = [m.topic for m in stored]
    reborn = topics.index(nbirth)  # the rebirth: the first NBIRTH the host stored
    before = [i for i in range(len(rows)) if cols["offset"][i] < reborn]
    after = [
        i
        for i in range(len(rows))
        if cols["offset"][i] > reborn and cols["message_type"][i] == "NDATA"
    ]
    assert before and all(cols["metric_name"][i] is None for i in before if cols["alias"][i])
    assert after, "no DATA after the rebirth"
    assert {cols["metric_name"][i] for i in after} == {"temp", "count"}
    assert all(cols["reason"][i] is None for i in after)
    counts = [cols["long_value"][i] for i in after if cols["metric_name"][i] == "count"]
    assert counts and all(v < 0 for v in counts)  # Int32 -n, sent as an unsigned 32-bit field
