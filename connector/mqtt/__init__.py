"""Sans-I/O MQTT 3.1/3.1.1 (and the MQTT 5.0 codec): codec, session state machine, topic rules,
one blocking driver.

Nothing here imports Spark. The codec and the session take bytes and return packets/events and
bytes to send; :mod:`connector.mqtt.driver` owns sockets, TLS, clocks and reconnects.
"""

from connector.mqtt.receive_buffer import ReceiveBuffer

from .config import SessionConfig
from .decode import decode_packet
from .encode import encode, encode_ack, encode_publish
from .errors import (
    BadUsernameOrPassword,
    ConnectionLost,
    ConnectionRefused,
    IdentifierRejected,
    InvalidArgument,
    InvalidTopic,
    KeepAliveTimeout,
    LocalProtocolError,
    MalformedFrame,
    MalformedPacket,
    MqttError,
    NotAuthorized,
    PacketTooLarge,
    RemoteProtocolError,
    RepeatedProtocolViolation,
    ServerUnavailable,
    SubscriptionRefused,
    UnacceptableProtocolVersion,
)
from .packets import Auth, ProtocolLevel, Publish, subscription_options
from .properties import Properties
from .reasons import is_failure, reason_name
from .session import ClientSession

__all__ = [
    "Auth",
    "BadUsernameOrPassword",
    "ClientSession",
    "ConnectionLost",
    "ConnectionRefused",
    "IdentifierRejected",
    "InvalidArgument",
    "InvalidTopic",
    "KeepAliveTimeout",
    "LocalProtocolError",
    "MalformedFrame",
    "MalformedPacket",
    "MqttError",
    "NotAuthorized",
    "PacketTooLarge",
    "Properties",
    "ProtocolLevel",
    "Publish",
    "ReceiveBuffer",
    "RemoteProtocolError",
    "RepeatedProtocolViolation",
    "ServerUnavailable",
    "SessionConfig",
    "SubscriptionRefused",
    "UnacceptableProtocolVersion",
    "decode_packet",
    "encode",
    "encode_ack",
    "encode_publish",
    "is_failure",
    "reason_name",
    "subscription_options",
]
