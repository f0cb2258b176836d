"""The sending side of a session: the packet identifiers this client uses (section 2.3.1) and
the exchanges they name until the broker ends them: outbound QoS 1/2 PUBLISH (section 4.3,
method A for QoS 2), SUBSCRIBE and UNSUBSCRIBE. What goes on the wire is the session's
business; this module holds what is in flight and what a new connection resends (section 4.4).
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import LocalProtocolError
from .packets import Publish


class Outbound:
    """Packet ids in use by this client and what each one waits for."""

    __slots__ = ("_next_id", "publishes", "subscribing", "unsubscribing")

    def __init__(self) -> None:
        self.publishes: dict[int, Publish | None] = {}
        """Outbound QoS 1/2 exchanges by id: the message until PUBACK or PUBREC (resent with
        DUP=1 on a new connection, section 4.4), then None for a QoS 2 one until PUBCOMP: its
        PUBREL went out and the message is discarded (section 4.3.3, method A)."""
        self.subscribing: dict[int, list[str]] = {}
        """SUBSCRIBE packets awaiting SUBACK on this connection: their filters, by id."""
        self.unsubscribing: set[int] = set()
        """UNSUBSCRIBE packets awaiting UNSUBACK on this connection."""
        self._next_id = 1

    def allocate(self) -> int:
        """Next free packet id: never 0, wraps after 65535, skips ids in use (section 2.3.1).
        LocalProtocolError when all are in use."""
        # The three tables never share an id, so their sizes add up to the ids in use.
        # Membership tests instead of a union keep this O(1) however many are in flight.
        publishes, subscribing, unsubscribing = (
            self.publishes,
            self.subscribing,
            self.unsubscribing,
        )
        if len(publishes) + len(subscribing) + len(unsubscribing) >= 0xFFFF:
            raise LocalProtocolError("all 65535 packet identifiers are in use")
        pid = self._next_id
        while pid in publishes or pid in subscribing or pid in unsubscribing:
            pid = pid % 0xFFFF + 1
        self._next_id = pid % 0xFFFF + 1
        return pid

    def unused(self, packet_id: int) -> None:
        """``packet_id`` was allocated and nothing was sent with it: it stays free."""
        self._next_id = packet_id

    def connection_lost(self) -> None:
        """SUBSCRIBE and UNSUBSCRIBE in flight end with their connection; publishes stay
        for the resend (section 4.4)."""
        self.subscribing.clear()
        self.unsubscribing.clear()

    def qos_in_flight(self, packet_id: int) -> int | None:
        """The QoS of the outbound PUBLISH in flight on ``packet_id`` (None: none)."""
        if packet_id not in self.publishes:
            return None
        message = self.publishes[packet_id]
        return 2 if message is None else message.qos

    def released(self, packet_id: int) -> None:
        """PUBREC accepted the QoS 2 message: PUBREL goes out, the message is discarded."""
        self.publishes[packet_id] = None

    def finished(self, packet_id: int) -> None:
        """PUBACK, PUBCOMP or a refusing PUBREC ended the exchange: the id is free."""
        del self.publishes[packet_id]

    def resends(self) -> Iterator[tuple[int, Publish | None]]:
        """What a new connection sends again, in order (section 4.4): each PUBLISH not
        acknowledged (with DUP=1), each PUBREL not completed (None)."""
        return iter(list(self.publishes.items()))

    def __len__(self) -> int:
        """Outbound QoS 1/2 messages not yet finished."""
        return len(self.publishes)
