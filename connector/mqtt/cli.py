"""``python -m connector.mqtt sub|pub``: debug a broker, drive tests and benchmarks.

``sub`` prints one JSON object per message and acknowledges a message only after its line has
been flushed to stdout; an MQTT 5 message's line also has ``properties``
(:func:`connector.mqtt.message_properties.message_properties`, correlation data in base64).
With ``--count N`` it then completes the QoS 2 exchanges of the printed messages (held PUBRECs
out, PUBRELs in, PUBCOMPs out; deadline ``--connect-timeout``) before it sends DISCONNECT;
messages beyond N stay unacknowledged, so the broker keeps them. ``pub`` is a pipelined load
generator that prints the rate it reached.
Exit codes: 0 success, 1 runtime failure (refused, unreachable, timeout), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence

from .address import BrokerAddress
from .config import DEFAULT_KEEP_ALIVE, DEFAULT_PUBLISH_WINDOW, SessionConfig
from .driver import DEFAULT_CONNECT_TIMEOUT, MqttClient
from .errors import MqttError
from .message_properties import message_properties
from .negotiated import (
    DEFAULT_MAXIMUM_PACKET_SIZE,
    MIN_MAXIMUM_PACKET_SIZE,
    PROTOCOL_MAXIMUM_PACKET_SIZE,
)
from .packets import ProtocolLevel, Publish
from .properties import Properties
from .session import ClientSession
from .tls import TlsOptions, validate_alpn
from .topics import validate_topic_filter, validate_topic_name

log = logging.getLogger("connector.mqtt.cli")

SEQUENCE_DIGITS = 10
"""``pub`` starts each payload (unless ``--payload``) with its sequence number in this many
digits, zero-padded, then filler up to ``--size``."""


class CliError(Exception):
    """A fatal condition reported as one line on stderr with exit code 1."""


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}..{high}, got {text}")
        return value

    return parse


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _qos(text: str) -> int:
    if text not in ("0", "1", "2"):
        raise argparse.ArgumentTypeError(f"QoS must be 0, 1 or 2, got {text}")
    return int(text)


def _add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        required=True,
        help="tcp://HOST:PORT, ssl://HOST:PORT or mqtts://; over WebSocket ws://HOST:PORT/PATH "
        "or wss:// (path /mqtt by default)",
    )
    parser.add_argument(
        "--client-id",
        help='client identifier (default: generated; "" at MQTT 5 lets the broker assign one, '
        "which reconnects reuse)",
    )
    parser.add_argument("--mqtt-version", default="3.1.1", choices=["3.1", "3.1.1", "5"])
    parser.add_argument(
        "--receive-maximum",
        type=_count(1, 0xFFFF),
        help="MQTT 5: QoS 1/2 messages the broker may send unacknowledged (default 65535)",
    )
    parser.add_argument(
        "--session-expiry",
        type=_count(0, 0xFFFF_FFFF),
        metavar="SECONDS",
        help="MQTT 5: how long the broker keeps the session after a disconnect (default: 0 "
        "with a clean session, else never expires)",
    )
    parser.add_argument(
        "--topic-alias-maximum",
        type=_count(0, 0xFFFF),
        help="MQTT 5: topic aliases the broker may set (default 0: none)",
    )
    parser.add_argument(
        "--max-packet-size",
        type=_count(MIN_MAXIMUM_PACKET_SIZE, PROTOCOL_MAXIMUM_PACKET_SIZE),
        metavar="BYTES",
        help="the largest packet taken from the broker, sent as Maximum Packet Size at MQTT 5 "
        f"(default: {DEFAULT_MAXIMUM_PACKET_SIZE} at MQTT 5, else the protocol's largest)",
    )
    parser.add_argument(
        "--keepalive", type=int, default=DEFAULT_KEEP_ALIVE, help="keep alive in seconds"
    )
    parser.add_argument("--username")
    parser.add_argument(
        "--password", help="password (or set MQTT_PASSWORD; never printed or logged)"
    )
    parser.add_argument(
        "--allow-password-over-plain-tcp",
        action="store_true",
        help="send the password over a tcp:// connection, unencrypted (refused otherwise)",
    )
    parser.add_argument("--cafile", help="CA bundle that signs the broker's certificate")
    parser.add_argument("--certfile", help="client certificate (mutual TLS)")
    parser.add_argument("--keyfile", help="client private key (mutual TLS)")
    parser.add_argument(
        "--insecure", action="store_true", help="TLS without verifying the broker (testing only)"
    )
    parser.add_argument(
        "--alpn",
        action="append",
        metavar="PROTOCOL",
        help="TLS ALPN protocol to offer (repeatable or comma-separated), e.g. x-amzn-mqtt-ca "
        "for AWS IoT Core on port 443",
    )
    parser.add_argument("--connect-timeout", type=_positive_float, default=DEFAULT_CONNECT_TIMEOUT)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m connector.mqtt", description="MQTT 3.1/3.1.1/5 subscriber and publisher"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    sub = commands.add_parser("sub", help="print messages as JSON lines")
    _add_connection_args(sub)
    sub.add_argument("--topic", action="append", required=True, help="topic filter (repeatable)")
    sub.add_argument("--qos", type=_qos, default=1)
    session = sub.add_mutually_exclusive_group()
    session.add_argument("--clean-session", dest="clean_session", action="store_true")
    session.add_argument("--no-clean-session", dest="clean_session", action="store_false")
    sub.set_defaults(clean_session=True)
    sub.add_argument("--count", type=int, help="exit 0 after this many messages")
    sub.add_argument("--timeout", type=_positive_float, help="fail after this many seconds")

    pub = commands.add_parser("pub", help="publish a burst of messages and print the rate")
    _add_connection_args(pub)
    pub.add_argument("--topic", required=True)
    pub.add_argument("--qos", type=_qos, default=0)
    pub.add_argument("--count", type=int, default=1)
    pub.add_argument("--size", type=int, default=100, help="payload bytes per message")
    pub.add_argument("--rate", type=_positive_float, help="messages per second (default: max)")
    pub.add_argument("--retain", action="store_true")
    pub.add_argument(
        "--inflight",
        type=int,
        default=DEFAULT_PUBLISH_WINDOW,
        help=f"QoS 1/2 messages awaiting acknowledgement (default {DEFAULT_PUBLISH_WINDOW}: "
        "a 3.1.1 broker may acknowledge and drop what goes over its limit, docs/brokers.md)",
    )
    pub.add_argument("--payload", help="fixed payload text instead of numbered filler")
    pub.add_argument(
        "--user-property",
        type=_pair,
        action="append",
        metavar="KEY=VALUE",
        help="MQTT 5: a User Property of every message (repeatable, order kept)",
    )
    pub.add_argument("--content-type", help="MQTT 5: the messages' Content Type")
    pub.add_argument(
        "--message-expiry",
        type=_count(0, 0xFFFF_FFFF),
        metavar="SECONDS",
        help="MQTT 5: the messages' Message Expiry Interval",
    )
    return parser


def _publish_properties(args: argparse.Namespace) -> Properties | None:
    """The PUBLISH properties ``pub`` was asked for; None when none (CliError below MQTT 5)."""
    if not (args.user_property or args.content_type is not None or args.message_expiry is not None):
        return None
    if args.mqtt_version != "5":
        raise CliError("--user-property, --content-type and --message-expiry need --mqtt-version 5")
    return Properties(
        content_type=args.content_type,
        message_expiry_interval=args.message_expiry,
        user_properties=list(args.user_property or ()),
    )


def _client(args: argparse.Namespace, subscriptions: list[tuple[str, int]]) -> MqttClient:
    try:
        address = BrokerAddress.parse(args.broker)
        level = ProtocolLevel.parse(args.mqtt_version)
        client_id = args.client_id
        if client_id is None or (not client_id and level != ProtocolLevel.MQTT_5):
            client_id = f"cm-{uuid.uuid4().hex[:16]}"
        password = args.password if args.password is not None else os.environ.get("MQTT_PASSWORD")
        username = args.username or os.environ.get("MQTT_USERNAME")
        config = SessionConfig(
            client_id=client_id,
            clean_session=getattr(args, "clean_session", True),
            keep_alive=args.keepalive,
            username=username,
            password=password.encode() if password is not None else None,
            level=level,
            receive_maximum=args.receive_maximum,
            session_expiry_interval=args.session_expiry,
            topic_alias_maximum=args.topic_alias_maximum,
            maximum_packet_size=args.max_packet_size,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if password is not None and not address.tls and not args.allow_password_over_plain_tcp:
        raise CliError(
            f"the password would be sent unencrypted to {address}; use an ssl://, mqtts:// or "
            "wss:// broker URL, or pass --allow-password-over-plain-tcp"
        )
    tls = None
    if address.tls or args.cafile or args.certfile or args.alpn:
        try:
            alpn = validate_alpn(n.strip() for item in args.alpn or () for n in item.split(","))
        except ValueError as exc:
            raise CliError(f"--alpn: {exc}") from None
        tls = TlsOptions(args.cafile, args.certfile, args.keyfile, not args.insecure, alpn)
        if not address.tls:
            raise CliError(
                "--cafile/--certfile/--alpn need an ssl://, mqtts:// or wss:// broker URL"
            )
    return MqttClient(
        address,
        ClientSession(config),
        subscriptions,
        tls=tls,
        connect_timeout=args.connect_timeout,
    )


def run_sub(args: argparse.Namespace) -> int:
    for topic_filter in args.topic:
        try:
            validate_topic_filter(topic_filter)
        except MqttError as exc:
            raise CliError(f"--topic {topic_filter!r}: {exc}") from None
    client = _client(args, [(t, args.qos) for t in args.topic])
    deadline = time.monotonic() + args.timeout if args.timeout else None
    out = sys.stdout.buffer
    received = 0
    with client:
        client.connect()
        while args.count is None or received < args.count:
            wait = 1.0
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    raise CliError(
                        f"timed out after {args.timeout} s with {received} message(s)"
                        + (f" of {args.count}" if args.count else "")
                    )
            read = client.poll(wait)
            messages = read.messages
            if args.count is not None:
                messages = messages[: args.count - received]
            if messages:
                v5 = client.session.config.level == ProtocolLevel.MQTT_5
                out.write(b"".join(_line(m, v5) for m in messages))
                out.flush()
                received += len(messages)
            client.acknowledge(messages, read.released)
        if args.count is not None:
            complete_qos2_exchanges(client, args.connect_timeout)
    return 0


def _line(message: Publish, v5: bool) -> bytes:
    """One message as a JSON line; at MQTT 5 with its ``properties``."""
    fields = {
        "topic": message.topic,
        "payload": base64.b64encode(message.payload).decode("ascii"),
        "qos": message.qos,
        "retained": message.retain,
        "duplicate": message.dup,
        "messageId": message.packet_id,
    }
    if v5:
        props = message_properties(message.properties)
        data = props["correlationData"]
        props["correlationData"] = None if data is None else base64.b64encode(data).decode()
        props["userProperties"] = [list(pair) for pair in props["userProperties"]]
        fields["properties"] = props
    return json.dumps(fields).encode() + b"\n"


def complete_qos2_exchanges(client: MqttClient, timeout: float) -> None:
    """Keep reading until every QoS 2 exchange the session acknowledged is complete: held
    PUBRECs sent, each PUBREL answered with PUBCOMP. Messages arriving meanwhile are not
    acknowledged (the broker keeps them for the next run). CliError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while pending := client.session.export_qos2_pending():
        left = deadline - time.monotonic()
        if left <= 0:
            raise CliError(
                f"{len(pending)} QoS 2 exchange(s) of printed messages still open after "
                f"{timeout} s: the broker may deliver those messages again"
            )
        read = client.poll(left)
        client.acknowledge([], read.released)
    log.debug("every QoS 2 exchange of the printed messages is complete")


def _payloads(args: argparse.Namespace) -> Sequence[bytes] | None:
    if args.payload is not None:
        return [args.payload.encode()]
    return None


def run_pub(args: argparse.Namespace) -> int:
    try:
        validate_topic_name(args.topic)
    except MqttError as exc:
        raise CliError(f"--topic {args.topic!r}: {exc}") from None
    if args.count < 0 or args.size < 0 or args.inflight < 1:
        raise CliError("--count and --size must be >= 0 and --inflight >= 1")
    properties = _publish_properties(args)
    client = _client(args, [])
    fixed = _payloads(args)
    filler = b"x" * max(0, args.size - SEQUENCE_DIGITS)
    interval = 1.0 / args.rate if args.rate else 0.0
    with client:
        client.connect()
        session = client.session
        start = time.monotonic()
        sent = 0
        while sent < args.count:
            # The broker's Receive Maximum (MQTT 5) bounds the window too (section 4.9).
            room = min(args.inflight - session.outbound_in_flight, session.send_quota)
            if args.qos and room <= 0:
                client.pump(1.0)
                continue
            room = room if args.qos else 1000
            burst = min(room, args.count - sent)
            if interval:
                due = start + sent * interval
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                burst = min(burst, max(1, int((time.monotonic() - start) / interval) - sent + 1))
            now = time.monotonic()
            for i in range(sent, sent + burst):
                payload = (
                    fixed[0] if fixed else (b"%0*d" % (SEQUENCE_DIGITS, i) + filler)[: args.size]
                )
                session.publish(args.topic, payload, args.qos, now, args.retain, properties)
            sent += burst
            client.flush()
            if not client.connected:
                raise CliError(f"lost the connection to {client.broker} while publishing")
        deadline = time.monotonic() + 30
        while session.outbound_in_flight and time.monotonic() < deadline:
            client.pump(1.0)
        if session.outbound_in_flight:
            raise CliError(f"{session.outbound_in_flight} message(s) were never acknowledged")
        elapsed = max(time.monotonic() - start, 1e-9)
    sys.stdout.write(
        json.dumps({"published": sent, "seconds": round(elapsed, 6), "rate": round(sent / elapsed)})
        + "\n"
    )
    sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return run_sub(args) if args.command == "sub" else run_pub(args)
    except (CliError, MqttError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
