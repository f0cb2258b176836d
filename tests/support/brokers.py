"""Real brokers and throwaway TLS material for the tests.

The brokers themselves live in :mod:`devtools.mosquitto` and :mod:`devtools.interop_brokers`
(the demo and the benchmarks run them too); `make_test_pki` builds a CA, server and client
certificates with the `openssl` command line tool; `BrokerFactory` starts Mosquitto brokers for
a test and stops them at its end; `InteropBroker` is the face the interop tests see of any of
Mosquitto, mochi-mqtt and aedes: a name, a `tcp://` URL and the log.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.broker_process import LOOPBACK, BrokerError, BrokerProcess, free_port, port_accepts
from devtools.mosquitto import DEFAULT_LOG_TYPES, MosquittoBroker, TlsListener, find_mosquitto
from devtools.system_tools import MissingToolError, find_tool, run_tool

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LOG_TYPES",
    "LOOPBACK",
    "BrokerError",
    "BrokerFactory",
    "InteropBroker",
    "MissingToolError",
    "MosquittoBroker",
    "Pki",
    "TlsListener",
    "find_mosquitto",
    "find_tool",
    "free_port",
    "make_test_pki",
    "port_accepts",
]


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files written by `make_test_pki`.

    The server certificate is for `localhost` and 127.0.0.1; `client_*` is
    signed by the same CA. `other_ca_*` is an unrelated CA, and `other_client_*`
    a client certificate it signed, for "wrong CA" tests.
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path
    other_ca_key: Path
    other_client_cert: Path
    other_client_key: Path

    def server_tls(self, *, require_certificate: bool = False) -> TlsListener:
        """Return a TLS listener config serving this PKI's server certificate."""
        return TlsListener(
            cafile=self.ca_cert,
            certfile=self.server_cert,
            keyfile=self.server_key,
            require_certificate=require_certificate,
        )


_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = unused

[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash

[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always

[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


def make_test_pki(directory: Path | str) -> Pki:
    """Write a test CA, server/client certificates and an unrelated CA into `directory`."""
    openssl = find_tool("openssl")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config = out / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG)

    def run_openssl(*parts: str | Path) -> None:
        # str parts are split on whitespace; Path parts are passed whole.
        args = [openssl]
        for part in parts:
            args.extend([str(part)] if isinstance(part, Path) else part.split())
        run_tool(args)

    def new_key(name: str) -> Path:
        path = out / f"{name}.key"
        run_openssl("genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out", path)
        path.chmod(0o600)
        return path

    def new_ca(name: str, common_name: str) -> tuple[Path, Path]:
        key, cert = new_key(name), out / f"{name}.crt"
        run_openssl(
            "req -x509 -new -config", config, "-extensions ca -key", key,
            f"-subj /CN={common_name} -days 3650 -sha256 -out", cert,
        )  # fmt: skip
        return cert, key

    def new_leaf(
        name: str, common_name: str, profile: str, ca: tuple[Path, Path]
    ) -> tuple[Path, Path]:
        key, csr, cert = new_key(name), out / f"{name}.csr", out / f"{name}.crt"
        run_openssl(
            "req -new -config", config, "-key", key, f"-subj /CN={common_name} -out", csr
        )  # fmt: skip
        run_openssl(
            "x509 -req -in", csr, "-CA", ca[0], "-CAkey", ca[1],
            f"-set_serial 0x{secrets.token_hex(8)} -days 825 -sha256",
            "-extfile", config, "-extensions", profile, "-out", cert,
        )  # fmt: skip
        csr.unlink()
        return cert, key

    ca = new_ca("ca", "connector-test-ca")
    server = new_leaf("server", "localhost", "server", ca)
    client = new_leaf("client", "connector-test-client", "client", ca)
    other_ca = new_ca("other-ca", "unrelated-test-ca")
    other_client = new_leaf("other-client", "connector-other-client", "client", other_ca)
    log.debug("wrote test PKI into %s", out)
    return Pki(
        directory=out,
        ca_cert=ca[0],
        ca_key=ca[1],
        server_cert=server[0],
        server_key=server[1],
        client_cert=client[0],
        client_key=client[1],
        other_ca_cert=other_ca[0],
        other_ca_key=other_ca[1],
        other_client_cert=other_client[0],
        other_client_key=other_client[1],
    )


class BrokerFactory:
    """Starts brokers in numbered subdirectories of `base_dir` and stops them all later."""

    def __init__(self, base_dir: Path | str) -> None:
        self.base_dir = Path(base_dir)
        self.brokers: list[MosquittoBroker] = []

    def __call__(self, **options: Any) -> MosquittoBroker:
        """Create and start a broker; `options` are `MosquittoBroker` keyword arguments."""
        workdir = self.base_dir / f"broker-{len(self.brokers)}"
        broker = MosquittoBroker(workdir, **options)
        self.brokers.append(broker)
        broker.start()
        return broker

    def close_all(self) -> list[str]:
        """Stop every broker; return a description of each one that had crashed."""
        crashed: list[str] = []
        for broker in self.brokers:
            if broker.crashed:
                crashed.append(
                    f"{broker!r} exited unexpectedly with status {broker.crash_returncode}; "
                    f"see {broker.log_path}"
                )
            broker.close()
        return crashed


@dataclass(frozen=True)
class InteropBroker:
    """A running broker of any kind, as the interop tests see it."""

    name: str
    broker: BrokerProcess

    @property
    def url(self) -> str:
        """`tcp://127.0.0.1:PORT`."""
        return self.broker.url

    @property
    def log_path(self) -> Path:
        """The broker's log file."""
        return self.broker.log_path

    def log_text(self) -> str:
        """Everything the broker has logged so far."""
        return self.broker.log_text()

    def __str__(self) -> str:
        return f"{self.name} at {self.url}"
