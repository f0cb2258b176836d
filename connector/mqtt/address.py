"""Where the broker is: a broker URL parsed into :class:`BrokerAddress` (TCP, TLS, MQTT over
WebSocket, MQTT section 6), shown without the credentials and the query string it must never
show."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .errors import InvalidArgument

DEFAULT_PORTS = {
    "tcp": 1883,
    "mqtt": 1883,
    "ssl": 8883,
    "mqtts": 8883,
    "tls": 8883,
    "ws": 80,
    "wss": 443,
}
TLS_SCHEMES = frozenset({"ssl", "mqtts", "tls", "wss"})
WEBSOCKET_SCHEMES = frozenset({"ws", "wss"})
DEFAULT_WEBSOCKET_PATH = "/mqtt"
"""The request path of a ``ws://``/``wss://`` URL without one: paho's default, and the path
common brokers serve MQTT over WebSocket on (docs/brokers.md)."""
ACCEPTED_URLS = (
    "tcp://host:port, ssl://host:port, mqtts://host:port, ws://host:port/path or "
    "wss://host:port/path"
)
_URL_TEXT = re.compile(r"[!-~]*")
"""What a request target may hold as given: printable ASCII, no spaces (RFC 3986 section 2)."""


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where the broker is and how to reach it.

    ``tcp://host:port`` (port 1883 by default; also ``mqtt://``), ``ssl://``, ``mqtts://`` or
    ``tls://host:port`` (8883, TLS), ``ws://host:port/path`` (80) and ``wss://host:port/path``
    (443, TLS): MQTT over WebSocket (MQTT section 6) with ``path`` as the request path,
    ``/mqtt`` when the URL has none. The query of a WebSocket URL (cloud brokers authenticate
    WebSocket connections with signed query strings) goes with the request but is never
    shown: ``str()`` and ``repr()``, and so logs and error messages, leave it out, as they do
    credentials (a URL with credentials is refused). TLS sends the host as SNI (RFC 6066
    section 3), but for an IP address (Python's ssl leaves it out, as the RFC says).
    """

    host: str
    port: int
    tls: bool
    websocket: bool = False
    path: str = ""
    """The WebSocket request path as given (percent-encoded); empty for TCP."""
    query: str = field(default="", repr=False)
    """The WebSocket request's query without ``?``: sent, never shown."""

    @classmethod
    def parse(cls, url: str) -> BrokerAddress:
        """Parse a broker URL; InvalidArgument (a ValueError) names what is wrong and what
        is accepted.

        Credentials in the URL (``tcp://user:secret@host``) are refused, and error messages
        never repeat them, nor the query string."""
        parts = urlsplit(url if "://" in url else f"tcp://{url}")
        shown = url
        if parts.query or parts.fragment:
            shown = parts._replace(query="", fragment="").geturl()
        if "@" in parts.netloc:
            hidden = parts._replace(
                netloc="***@" + parts.netloc.rsplit("@", 1)[1], query="", fragment=""
            )
            raise InvalidArgument(
                f"broker URL {hidden.geturl()!r} carries credentials; give them as the user "
                "name and password settings instead (they are never shown or logged)"
            )
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise InvalidArgument(
                f"broker URL {shown!r}: scheme {scheme!r} is not supported; use {ACCEPTED_URLS}"
            )
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError:
            raise InvalidArgument(
                f"broker URL {shown!r}: the port is not a number in 1..65535"
            ) from None
        if not parts.hostname:
            raise InvalidArgument(f"broker URL {shown!r} has no host name")
        tls = scheme in TLS_SCHEMES
        if scheme not in WEBSOCKET_SCHEMES:
            return cls(parts.hostname, port, tls)
        path = parts.path or DEFAULT_WEBSOCKET_PATH
        if not _URL_TEXT.fullmatch(path):
            raise InvalidArgument(
                f"broker URL {shown!r}: the path must be printable ASCII without spaces "
                "(percent-encode other characters)"
            )
        if not _URL_TEXT.fullmatch(parts.query):
            raise InvalidArgument(
                f"broker URL {shown!r}: the query (not shown) must be printable ASCII without "
                "spaces (percent-encode other characters)"
            )
        return cls(parts.hostname, port, tls, websocket=True, path=path, query=parts.query)

    @property
    def request_target(self) -> str:
        """The WebSocket request's target: the path and the query. Never log it."""
        return f"{self.path}?{self.query}" if self.query else self.path

    def __str__(self) -> str:
        if self.websocket:
            return f"{'wss' if self.tls else 'ws'}://{self.host}:{self.port}{self.path}"
        return f"{'ssl' if self.tls else 'tcp'}://{self.host}:{self.port}"
