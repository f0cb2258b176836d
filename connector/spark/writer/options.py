"""Options of ``df.write.format("mqtt")`` and ``writeStream.format("mqtt")``, parsed once.

The writer shares the reader's connection, credential, TLS and version options (one row each in
:mod:`connector.options.table`, ``side`` "both") and has a few of its own; a reader's
option given to the writer is refused by name. Every invalid option raises
:class:`~connector.options.source.InvalidOptionError` on the driver, before a byte is sent. The
simple options fill the fields their rows name (``field``, ``write_field``); the topic, the
client id prefix, the credentials and TLS are worked out here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from connector.mqtt.address import BrokerAddress
from connector.mqtt.config import SessionConfig
from connector.mqtt.errors import MqttError
from connector.mqtt.packets import ProtocolLevel
from connector.mqtt.tls import TlsOptions
from connector.mqtt.topics import validate_topic_name
from connector.options.source import (
    InvalidOptionError,
    canonical_options,
    parse_broker,
    parse_credentials,
    parse_tls,
    table_fields,
)

CLIENT_ID_PREFIX = "spark-mqtt-w"
"""The writing tasks' client id prefix when ``clientId`` is not given (see
:func:`connector.spark.writer.task.task_client_id`)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Validated options of one MQTT write; the password is never shown."""

    broker: BrokerAddress
    topic: str | None
    """The topic of rows without a ``topic`` column (None: the column is required)."""
    qos: int
    mqtt_version: ProtocolLevel
    client_id_prefix: str
    keep_alive: int
    connect_timeout: float
    ignore_extra_columns: bool
    idempotency_key: bool
    publish_timeout: float
    max_inflight: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsOptions | None = None

    @property
    def mqtt5(self) -> bool:
        return self.mqtt_version == ProtocolLevel.MQTT_5

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        """Validate raw string options (any key case)."""
        opts = canonical_options(raw, writer=True)
        broker = parse_broker(opts)
        topic = opts.get("topic") or None
        if topic is not None:
            try:
                validate_topic_name(topic)
            except MqttError as exc:
                raise InvalidOptionError(
                    f"option 'topic' {topic!r}: the writer needs a topic name, not a filter: {exc}"
                ) from None
        username, password = parse_credentials(opts, broker)
        prefix = opts.get("clientId") or CLIENT_ID_PREFIX
        if "\x00" in prefix or len(prefix.encode()) > 200:
            raise InvalidOptionError(
                "option 'clientId' (the writer's client id prefix) must be UTF-8 up to 200 "
                "bytes without U+0000"
            )
        worked_out = {
            "broker": broker,
            "topic": topic,
            "client_id_prefix": prefix,
            "username": username,
            "password": password,
        }
        fields = table_fields(opts, worked_out, writer=True)
        return cls(**fields, tls=parse_tls(opts, broker))

    def session_config(self, client_id: str) -> SessionConfig:
        """A clean session for one writing task (nothing of it outlives the task)."""
        return SessionConfig(
            client_id=client_id,
            clean_session=True,
            keep_alive=self.keep_alive,
            username=self.username,
            password=None if self.password is None else self.password.encode(),
            level=self.mqtt_version,
        )
