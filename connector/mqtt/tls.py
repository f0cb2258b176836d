"""TLS for the driver: the settings (:class:`TlsOptions`: CA, client certificate, ALPN) and
the one mapping from a failed handshake to the error the caller sees (:func:`tls_failure`),
whichever transport carried it (TCP or WebSocket)."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import BrokerUnreachable, InvalidArgument, MqttError, TlsError

_ALPN_NAME = re.compile(r"[!-~]{1,255}")


def validate_alpn(names: Iterable[str]) -> tuple[str, ...]:
    """ALPN protocol names (RFC 7301 section 3.1: non-empty, at most 255 bytes), as a tuple;
    InvalidArgument names the first bad one. They must be printable ASCII without spaces,
    as the registered names are (``x-amzn-mqtt-ca``, ``mqtt``, ``http/1.1``)."""
    out = tuple(names)
    for name in out:
        if not _ALPN_NAME.fullmatch(name):
            raise InvalidArgument(
                f"ALPN protocol name {name!r} must be 1 to 255 printable ASCII characters "
                "without spaces"
            )
    return out


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """TLS settings: CA bundle, client certificate and key; server verification by default.

    ``alpn``: the application protocols offered in the handshake (RFC 7301), e.g.
    ``("x-amzn-mqtt-ca",)`` for MQTT with a client certificate on AWS IoT Core's port 443. A
    server that requires one of its own refuses the handshake (a TlsError naming the alert); a
    server that knows no ALPN selects none, and the connection goes on (logged at INFO)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    alpn: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpn", validate_alpn(self.alpn))

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.alpn:
            ctx.set_alpn_protocols(list(self.alpn))
        return ctx


def tls_failure(
    exc: OSError, broker: object, options: TlsOptions, *, after: str | None = None
) -> MqttError:
    """The error the caller sees for ``exc``, raised while talking TLS to ``broker``: the
    one mapping of TLS failures, whichever transport carried them.

    In the TLS handshake (``after`` None): an untrusted certificate is a TlsError naming the
    CA settings; a broker that hangs up is BrokerUnreachable (restarting, overloaded or not a
    TLS port: worth retrying); any other SSL error is a TlsError saying why. After it
    (``after`` names what was under way, e.g. "WebSocket handshake"): TLS 1.3 finishes the
    client's handshake before the broker has checked the client certificate, so its refusal
    arrives as an alert on the first read or write, a TlsError; anything else there is
    BrokerUnreachable. Other socket errors are BrokerUnreachable."""
    if after is not None:
        if is_rejection(exc):
            assert isinstance(exc, ssl.SSLError)
            return TlsError(
                f"TLS: {broker} rejected the connection ({ssl_reason(exc)})" + _hint(exc, options)
            )
        reason = ssl_reason(exc) if isinstance(exc, ssl.SSLError) else exc.strerror or exc
        return BrokerUnreachable(f"{after} with {broker} failed: {reason}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(
            f"TLS: the certificate of {broker} is not trusted ({exc.verify_message}); check "
            "the CA file (tls.caFile / --cafile) and the host name"
        )
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return BrokerUnreachable(
            f"TLS handshake with {broker} failed: the broker closed the connection ({exc}); "
            "is it a TLS listener?"
        )
    if isinstance(exc, ssl.SSLError):
        return TlsError(
            f"TLS handshake with {broker} failed: {ssl_reason(exc)}" + _hint(exc, options)
        )
    return BrokerUnreachable(f"TLS handshake with {broker} failed: {exc}; is it a TLS listener?")


def is_rejection(exc: BaseException) -> bool:
    """Whether ``exc`` is a TLS alert from the peer: it refused our certificate (or its
    absence) or the ALPN protocols offered."""
    return isinstance(exc, ssl.SSLError) and "ALERT" in (exc.reason or "")


def ssl_reason(exc: ssl.SSLError) -> str:
    """``TLSV13_ALERT_CERTIFICATE_REQUIRED`` -> ``tlsv13 alert certificate required``."""
    if exc.reason:
        return exc.reason.lower().replace("_", " ")
    return str(exc)


def _hint(exc: ssl.SSLError, options: TlsOptions) -> str:
    """Explain a TLS alert by which the broker rejected our (missing) certificate, or the
    ALPN protocols we offered."""
    # OpenSSL 3 names this alert in the message only (``reason`` is None).
    if "no application protocol" in str(exc).lower().replace("_", " "):
        offered = ", ".join(options.alpn) or "none"
        return (
            f"; the broker accepts none of the ALPN protocols offered ({offered}): set the "
            "one it expects with tls.alpn / --alpn (AWS IoT Core, MQTT on port 443: "
            "x-amzn-mqtt-ca)"
        )
    if "ALERT" not in (exc.reason or ""):
        return ""
    if options.cert_file is None:
        return (
            "; the broker probably requires a client certificate: set the certificate and "
            "key (tls.certFile and tls.keyFile / --certfile and --keyfile)"
        )
    return (
        f"; the broker rejected the client certificate {options.cert_file}: check that it is "
        "signed by a CA the broker trusts"
    )
