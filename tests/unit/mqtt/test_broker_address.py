"""Broker URLs (``BrokerAddress.parse``) and TLS ALPN names (``validate_alpn``).

Rules: ``ws://`` (port 80) and ``wss://`` (443, TLS) are MQTT over WebSocket with the URL's
path, ``/mqtt`` when it has none; the query goes with the request but never into ``str()``,
``repr()`` or an error message (it may hold a signature), as credentials never do. ``tcp://``
and ``ssl://`` addresses print as before (the derived client id hashes ``str()``). ALPN names are
1 to 255 printable ASCII characters (RFC 7301 section 3.1).
"""

from __future__ import annotations

import pytest

from connector.mqtt.address import BrokerAddress
from connector.mqtt.errors import InvalidArgument
from connector.mqtt.tls import TlsOptions, validate_alpn
from connector.mqtt.websocket import host_header

SECRET = "X-Amz-Signature=feedfacecafe"


@pytest.mark.parametrize(
    ("url", "shown", "tls", "target"),
    [
        ("ws://broker", "ws://broker:80/mqtt", False, "/mqtt"),
        ("wss://broker", "wss://broker:443/mqtt", True, "/mqtt"),
        ("WSS://broker:8084/", "wss://broker:8084/", True, "/"),
        ("ws://broker:8080/ws/v1", "ws://broker:8080/ws/v1", False, "/ws/v1"),
        ("wss://b/mqtt?a=1&b=%2F#frag", "wss://b:443/mqtt", True, "/mqtt?a=1&b=%2F"),
    ],
)
def test_websocket_urls(url: str, shown: str, tls: bool, target: str) -> None:
    address = BrokerAddress.parse(url)
    assert address.websocket and address.tls is tls
    assert str(address) == shown
    assert address.request_target == target


def test_tcp_urls_print_as_before_and_ignore_a_path() -> None:
    for url, shown in [
        ("tcp://h:1883", "tcp://h:1883"),
        ("h", "tcp://h:1883"),
        ("mqtts://h", "ssl://h:8883"),
        ("ssl://h:8884/ignored?x=1", "ssl://h:8884"),
    ]:
        address = BrokerAddress.parse(url)
        assert str(address) == shown and not address.websocket
        assert (address.path, address.query) == ("", "")


def test_the_query_is_sent_but_never_shown() -> None:
    address = BrokerAddress.parse(f"wss://iot.example.com/mqtt?{SECRET}")
    assert address.request_target == f"/mqtt?{SECRET}"
    assert SECRET not in str(address) and "feedface" not in repr(address)
    assert f"{address}" == "wss://iot.example.com:443/mqtt"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (f"ws://h:99999/mqtt?{SECRET}", "the port is not a number"),
        (f"ws:///mqtt?{SECRET}", "has no host name"),
        (f"ws://h/caf\u00e9?{SECRET}", "the path must be printable ASCII"),
        ("ws://h/mqtt?a=caf\u00e9", "the query (not shown) must be printable ASCII"),
        (f"ws://user:pw@h/mqtt?{SECRET}", "carries credentials"),
        (f"http://h/mqtt?{SECRET}", "scheme 'http' is not supported"),
    ],
)
def test_errors_name_the_url_without_query_or_credentials(url: str, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        BrokerAddress.parse(url)
    message = str(error.value)
    assert fragment in message
    assert SECRET not in message and ":pw" not in message and "a=caf" not in message


def test_an_unsupported_scheme_lists_every_accepted_one() -> None:
    with pytest.raises(InvalidArgument) as error:
        BrokerAddress.parse("ftp://h")
    for scheme in ("tcp://", "ssl://", "mqtts://", "ws://", "wss://"):
        assert scheme in str(error.value)


@pytest.mark.parametrize(
    ("host", "port", "default", "header"),
    [
        ("broker", 80, 80, "broker"),
        ("broker", 8080, 80, "broker:8080"),
        ("iot.example.com", 443, 443, "iot.example.com"),
        ("::1", 8083, 80, "[::1]:8083"),
    ],
)
def test_the_host_header_leaves_out_the_default_port(
    host: str, port: int, default: int, header: str
) -> None:
    assert host_header(host, port, default) == header


def test_alpn_names() -> None:
    assert validate_alpn(["x-amzn-mqtt-ca", "mqtt", "http/1.1"]) == (
        "x-amzn-mqtt-ca",
        "mqtt",
        "http/1.1",
    )
    assert validate_alpn(["a" * 255]) == ("a" * 255,)
    assert TlsOptions(alpn=["mqtt"]).alpn == ("mqtt",)  # type: ignore[arg-type]
    assert TlsOptions(alpn=("x-amzn-mqtt-ca",)).context() is not None


@pytest.mark.parametrize("bad", ["", "a" * 256, "caf\u00e9", "two words", "tab\t"])
def test_bad_alpn_names_are_named(bad: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        validate_alpn(["mqtt", bad])
    assert repr(bad) in str(error.value)
    with pytest.raises(InvalidArgument):
        TlsOptions(alpn=(bad,))
