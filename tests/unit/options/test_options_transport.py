"""WebSocket URLs and ``tls.alpn`` where users give them: the source's options, the ingest
job's flags and config file, and ``python -m connector.mqtt``'s flags. No connection is made.

Rules: ``wss://`` is TLS (``tls.*`` options apply, a password may go), ``ws://`` is not;
``tls.alpn`` is a comma-separated list of ALPN names, each checked, the bad one named; the
query of a WebSocket URL is neither shown (redacted options) nor part of the derived client
id, so a signature that changes keeps the session.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from connector.mqtt.cli import CliError, _client, build_parser
from connector.options.source import InvalidOptionError, SourceOptions
from streaming_jobs.ingest_config import UsageError, parse_config, source_options

TOPIC = {"topic": "plant/#"}


def parse(**options: str) -> SourceOptions:
    return SourceOptions.parse({**TOPIC, **{k.replace("_", "."): v for k, v in options.items()}})


def test_wss_is_tls_and_ws_is_not() -> None:
    secure = parse(brokerUrl="wss://iot.example.com/mqtt")
    assert secure.broker.websocket and secure.tls is not None and secure.tls.verify
    plain = parse(brokerUrl="ws://127.0.0.1:8080")
    assert plain.broker.websocket and plain.tls is None
    assert str(plain.broker) == "ws://127.0.0.1:8080/mqtt"


def test_alpn_option_is_a_checked_comma_separated_list() -> None:
    options = parse(brokerUrl="ssl://iot.example.com:443", tls_alpn=" x-amzn-mqtt-ca , mqtt")
    assert options.tls is not None and options.tls.alpn == ("x-amzn-mqtt-ca", "mqtt")
    secure = parse(brokerUrl="wss://h", tls_alpn="http/1.1")
    assert secure.tls is not None and secure.tls.alpn == ("http/1.1",)


@pytest.mark.parametrize(
    ("value", "named"),
    [("", "''"), ("a,,b", "''"), ("caf\u00e9", "'caf\u00e9'"), ("x" * 256, "xxx")],
)
def test_a_bad_alpn_name_is_named(value: str, named: str) -> None:
    with pytest.raises(InvalidOptionError) as error:
        parse(brokerUrl="ssl://h:443", tls_alpn=value)
    assert "option 'tls.alpn'" in str(error.value) and named in str(error.value)


@pytest.mark.parametrize("url", ["tcp://h:1883", "ws://h/mqtt"])
def test_alpn_needs_a_tls_url(url: str) -> None:
    with pytest.raises(InvalidOptionError, match=r"need an ssl://, mqtts:// or wss://"):
        parse(brokerUrl=url, tls_alpn="mqtt")


def test_a_password_may_go_over_wss_but_not_ws() -> None:
    parse(brokerUrl="wss://h", username="u", password="pw")
    with pytest.raises(InvalidOptionError, match="unencrypted"):
        parse(brokerUrl="ws://h", username="u", password="pw")


def test_the_query_is_not_shown_nor_part_of_the_client_id() -> None:
    first = parse(brokerUrl="wss://h/mqtt?X-Amz-Signature=aaaa", walPath="/tmp/w")
    second = parse(brokerUrl="wss://h/mqtt?X-Amz-Signature=bbbb", walPath="/tmp/w")
    assert first.client_id == second.client_id
    assert first.redacted()["brokerUrl"] == "wss://h:443/mqtt"
    assert "aaaa" not in repr(first)


# ----------------------------------------------------------------------------- ingest job

BASE = ["--topic", "a/#", "--table", "t", "--checkpoint", "c"]


def test_the_job_passes_alpn_from_a_flag_or_a_config_list(tmp_path: Path) -> None:
    argv = ["--broker", "ssl://iot.example.com:443", *BASE, "--alpn", "x-amzn-mqtt-ca"]
    config, _ = parse_config(argv, environ={})
    assert source_options(config)["tls.alpn"] == "x-amzn-mqtt-ca"
    toml = tmp_path / "job.toml"
    toml.write_text('alpn = ["x-amzn-mqtt-ca", "mqtt"]\n')
    config, _ = parse_config(["--broker", "wss://h", *BASE, "--config", str(toml)], environ={})
    assert source_options(config)["tls.alpn"] == "x-amzn-mqtt-ca,mqtt"


def test_the_job_names_its_flags_in_tls_errors() -> None:
    with pytest.raises(UsageError, match=r"--alpn"):
        parse_config(["--broker", "tcp://h:1883", *BASE, "--alpn", "mqtt"], environ={})
    with pytest.raises(UsageError, match=r"--alpn: ALPN protocol name ''"):
        parse_config(["--broker", "ssl://h:443", *BASE, "--alpn", "a,,b"], environ={})
    config, _ = parse_config(["--broker", "wss://h", *BASE, "--insecure"], environ={})
    assert source_options(config)["tls.verify"] == "false"


# ------------------------------------------------------------------------------------- CLI


def cli_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["sub", "--topic", "t", *argv])


def test_the_cli_takes_alpn_repeated_or_comma_separated() -> None:
    args = cli_args("--broker", "ssl://h:443", "--alpn", "a,b", "--alpn", "c")
    client = _client(args, [])
    assert client.tls is not None and client.tls.alpn == ("a", "b", "c")
    assert _client(cli_args("--broker", "wss://h"), []).tls is not None
    assert _client(cli_args("--broker", "ws://h"), []).tls is None


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--broker", "ssl://h", "--alpn", "a,,b"], "--alpn: ALPN protocol name ''"),
        (["--broker", "ws://h", "--alpn", "mqtt"], "need an ssl://, mqtts:// or wss://"),
    ],
)
def test_the_cli_refuses_bad_alpn(argv: list[str], fragment: str) -> None:
    with pytest.raises(CliError, match=fragment):
        _client(cli_args(*argv), [])
