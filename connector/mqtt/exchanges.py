"""Inbound QoS 2 exchanges on the receiving side: one state per packet id (MQTT 3.1.1 section
4.3.3, method B; section 4.4 for what a new connection carries over).

A PUBLISH delivered to the caller and not yet stored has no state here: the session keeps it
with the deliveries of its connection. From the caller's ``ack`` on, the exchange has one
:class:`Exchange` in :attr:`Exchanges.states`, changed only by :meth:`Exchanges.move`, along
the edges of :data:`TRANSITIONS`; the PUBREC window's room and queue follow from the states
there. When the session sends PUBREC or PUBCOMP is the session's business
(:mod:`connector.mqtt.session`); this module holds where each exchange stands.
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum


class Exchange(Enum):
    """Where an inbound QoS 2 exchange stands once its message is stored.

    Each state says whether the exchange was first delivered on the current connection
    (``here``: a PUBLISH with DUP=0 and its id then reuses an open id), whether it holds room
    in the PUBREC window (``room``: PUBREC written on this connection, PUBCOMP not yet sent),
    whether its PUBREC waits for room (``held``) and whether its PUBREL arrived (``released``).
    """

    STORED = (False, False, False, False)
    """Stored, PUBREL not received, no PUBREC on this connection: stored on an earlier
    connection, restored after a restart, or acknowledged after its connection was gone. A
    PUBLISH with its id is the resend ([MQTT-4.3.3-2]), answered with PUBREC."""
    PUBREC_HELD = (True, False, True, False)
    """Delivered and stored on this connection; its PUBREC waits for room in the window."""
    PUBREC_SENT = (True, True, False, False)
    """Delivered and stored on this connection, answered with PUBREC; PUBREL awaited."""
    RESEND_PUBREC_HELD = (False, False, True, False)
    """STORED, and the broker resent it on this connection; its PUBREC waits for room."""
    RESEND_PUBREC_SENT = (False, True, False, False)
    """STORED, and the broker's resend on this connection was answered with PUBREC."""
    RELEASING = (False, False, False, True)
    """PUBREL received; PUBCOMP waits for the caller to store the release (``complete``)."""
    RELEASING_IN_WINDOW = (False, True, False, True)
    """RELEASING, its PUBREC written on this connection: it holds room until PUBCOMP."""

    def __init__(self, here: bool, room: bool, held: bool, released: bool) -> None:
        self.here = here
        self.room = room
        self.held = held
        self.released = released

    @property
    def carried_over(self) -> Exchange:
        """What a new connection makes of this state (section 4.4: the broker resends the
        PUBLISH of an exchange it got no PUBREC for, and PUBREL after PUBREC)."""
        return Exchange.RELEASING if self.released else Exchange.STORED


# Module-level names for the hot path: an enum member looked up on its class costs ~65 ns.
STORED = Exchange.STORED
PUBREC_HELD = Exchange.PUBREC_HELD
PUBREC_SENT = Exchange.PUBREC_SENT
RESEND_PUBREC_HELD = Exchange.RESEND_PUBREC_HELD
RESEND_PUBREC_SENT = Exchange.RESEND_PUBREC_SENT
RELEASING = Exchange.RELEASING
RELEASING_IN_WINDOW = Exchange.RELEASING_IN_WINDOW

_Edge = tuple[Exchange | None, Exchange | None]


def _edges(
    sources: tuple[Exchange | None, ...], targets: tuple[Exchange | None, ...]
) -> list[_Edge]:
    return [(was, to) for was in sources for to in targets]


_STORED_STATES = (STORED, PUBREC_HELD, PUBREC_SENT, RESEND_PUBREC_HELD, RESEND_PUBREC_SENT)
_RELEASED_STATES = (RELEASING, RELEASING_IN_WINDOW)

_WHY: tuple[tuple[list[_Edge], str], ...] = (
    (_edges((None,), (PUBREC_SENT, PUBREC_HELD)), "the caller stored a delivery"),
    (_edges((None,), (STORED,)), "restored, or stored after its connection was gone"),
    (_edges((STORED,), (RESEND_PUBREC_SENT, RESEND_PUBREC_HELD)), "resent (section 4.4)"),
    (
        [(PUBREC_HELD, PUBREC_SENT), (RESEND_PUBREC_HELD, RESEND_PUBREC_SENT)],
        "room in the window: the PUBREC goes out",
    ),
    (_edges((PUBREC_SENT, RESEND_PUBREC_SENT), (RELEASING_IN_WINDOW,)), "PUBREL"),
    (
        _edges((STORED, PUBREC_HELD, RESEND_PUBREC_HELD), (RELEASING,)),
        "PUBREL; a PUBREC still held is not sent any more: the PUBREL answers it",
    ),
    (_edges(_RELEASED_STATES, (None,)), "the release is stored: PUBCOMP (section 4.3.3)"),
    (
        [(state, state.carried_over) for state in (*_STORED_STATES, *_RELEASED_STATES)],
        "the connection is gone",
    ),
    (
        _edges(_STORED_STATES, (None,)),
        "the broker gave the id to another message (a broker fault, section 2.3.1), or it "
        "holds no session (section 3.2.2.2)",
    ),
    (
        [
            *_edges((RELEASING,), (PUBREC_SENT, PUBREC_HELD)),
            *_edges(_RELEASED_STATES, (STORED,)),
            (RELEASING_IN_WINDOW, PUBREC_SENT),
        ],
        "a broker reused the id after PUBREL and before PUBCOMP (a broker fault, section "
        "2.3.1), and the new message was stored before the release",
    ),
)

TRANSITIONS: dict[_Edge, str] = {
    edge: why for edges, why in _WHY for edge in edges if edge[0] is not edge[1]
}
"""Every change an exchange's state may undergo, (before, after) -> why; ``None``: no exchange
open on the id. :meth:`Exchanges.move` keeps to these (the tests check every move)."""


class Exchanges:
    """The inbound QoS 2 exchanges of one session, by packet id, and the PUBREC window."""

    __slots__ = ("pubrecs_held", "queue", "room_taken", "states")

    def __init__(self) -> None:
        self.states: dict[int, Exchange] = {}
        """One state per packet id; an id without an entry has no exchange open."""
        self.room_taken = 0
        """How many states hold room in the window (PUBREC written on this connection,
        PUBCOMP not sent yet)."""
        self.queue: OrderedDict[int, None] = OrderedDict()
        """The ids in a held state, oldest first: the order their PUBRECs go out (section
        4.6). The order the exchanges were held in is not the order of ``states``; taking the
        oldest held from there would walk past every exchange ahead of it, up to a window's
        worth per PUBREC, and an OrderedDict gives the oldest at once."""
        self.pubrecs_held = 0
        """PUBRECs that had to wait for room in the window (all connections)."""

    def move(self, packet_id: int, to: Exchange | None) -> None:
        """Put the exchange of ``packet_id`` in state ``to`` (None: closed); the one place a
        state changes. Keeps ``room_taken`` and ``queue`` in step with the states."""
        states = self.states
        was = states.get(packet_id)
        if was is to:
            return
        if to is None:
            del states[packet_id]
        else:
            states[packet_id] = to
            if to.room:
                self.room_taken += 1
            elif to.held and (was is None or not was.held):
                self.queue[packet_id] = None
                self.pubrecs_held += 1
        if was is not None:
            if was.room:
                self.room_taken -= 1
            elif was.held and (to is None or not to.held):
                del self.queue[packet_id]

    def has_room(self, window: int) -> bool:
        """Whether a new PUBREC may go out now: no window (0), or none held before it and
        fewer than ``window`` exchanges of this connection awaiting PUBCOMP."""
        return not window or (not self.queue and self.room_taken < window)

    def carry_over(self) -> None:
        """The connection is gone: every exchange takes its ``carried_over`` state."""
        for packet_id, state in list(self.states.items()):
            self.move(packet_id, state.carried_over)

    def forget_stored(self) -> tuple[int, ...]:
        """Close the exchanges whose PUBREL has not arrived (the broker holds no session and
        will send none, section 3.2.2.2); returns their ids, in order."""
        forgotten = tuple(sorted(pid for pid, st in self.states.items() if not st.released))
        for packet_id in forgotten:
            self.move(packet_id, None)
        return forgotten
