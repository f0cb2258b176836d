"""Inbound QoS 2 exchanges on the receiving side: one state per packet id (MQTT 3.1.1 section
4.3.3, method B; section 4.4 for what a new connection carries over), moved by events along a
table that decides.

A PUBLISH delivered to the caller and not yet stored has no state here: the session keeps it
with the deliveries of its connection. From the caller's ``ack`` on, the exchange has one
:class:`Exchange` in :attr:`Exchanges.states`. Each thing that happens to it is a :class:`Step`
(stored, resent, released, completed, ...), and :data:`TRANSITIONS` says, for the state it is
in, the state it goes to; a step the table does not allow from that state raises
:class:`IllegalTransition`. The methods of :class:`Exchanges` are named for the steps and
return what the session has to send (a PUBREC now or not); the PUBREC window's room and queue
follow from the states. The session names no state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import cast

from .errors import LocalProtocolError


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
    """PUBREL received; PUBCOMP waits for the caller to store the release (``completed``)."""
    RELEASING_IN_WINDOW = (False, True, False, True)
    """RELEASING, its PUBREC written on this connection: it holds room until PUBCOMP."""

    def __init__(self, here: bool, room: bool, held: bool, released: bool) -> None:
        self.here = here
        self.room = room
        self.held = held
        self.released = released
        self.next: dict[str, Exchange | None] = {}
        """The state each allowed step leads to (filled from :data:`TRANSITIONS`)."""
        self.held_twin: Exchange | None = None
        """For a state that takes room in the window: the one it takes when the window is
        full (its PUBREC waits); set below."""


class Step:
    """What happens to an exchange: the events of :class:`Exchanges` (plain strings, cheap
    to look up on the per-message path)."""

    STORED = "stored"
    """The caller stored a delivery of this connection (its ``ack``): PUBREC, or held."""
    STORED_LATE = "stored late"
    """Stored after its connection was gone, or restored after a restart: no PUBREC can be
    written now; the broker's resend gets it."""
    RESENT = "resent"
    """The broker resent a stored exchange's PUBLISH on this connection (section 4.4)."""
    ROOM = "room"
    """A PUBCOMP freed room in the window: the oldest held PUBREC goes out (section 4.6)."""
    RELEASED = "released"
    """PUBREL arrived (section 4.3.3): PUBCOMP once the caller stores the release."""
    COMPLETED = "completed"
    """The caller stored the release: PUBCOMP; the id is free."""
    CONNECTION_LOST = "connection lost"
    """The connection is gone (section 4.4: the broker resends the PUBLISH of an exchange it
    got no PUBREC for, and PUBREL after PUBREC)."""
    SESSION_LOST = "session lost"
    """The broker holds no session (section 3.2.2.2): it sends no PUBREL for stored ids."""
    ID_REUSED = "id reused"
    """A broker fault (section 2.3.1): the broker gave a stored exchange's id to another
    message; the new message takes the id."""


class IllegalTransition(LocalProtocolError):
    """A step the table does not allow from the exchange's state: a bug of the session (the
    broker's faults are steps of their own)."""


E = Exchange
_STORED_HERE = (E.STORED, E.PUBREC_HELD, E.PUBREC_SENT, E.RESEND_PUBREC_HELD, E.RESEND_PUBREC_SENT)
_RELEASED = (E.RELEASING, E.RELEASING_IN_WINDOW)

_WHY: tuple[tuple[str, dict[Exchange | None, Exchange | None], str], ...] = (
    (
        Step.STORED,
        {
            None: E.PUBREC_SENT,
            E.RELEASING: E.PUBREC_SENT,
            E.RELEASING_IN_WINDOW: E.PUBREC_SENT,
            E.STORED: E.STORED,
        },
        "PUBREC (held while the window has no room); a release not complete yet is a broker "
        "that reused the id before PUBCOMP (a fault, section 2.3.1): the new exchange takes "
        "over the release and its room; an id restored meanwhile keeps its state (its resend "
        "gets the PUBREC)",
    ),
    (
        Step.STORED_LATE,
        {
            None: E.STORED,
            E.STORED: E.STORED,
            E.RELEASING: E.STORED,
            E.RELEASING_IN_WINDOW: E.STORED,
        },
        "stored after its connection was gone or restored; over a release not complete, a "
        "broker that reused the id before PUBCOMP (a fault, section 2.3.1)",
    ),
    (
        Step.RESENT,
        {
            E.STORED: E.RESEND_PUBREC_SENT,
            E.PUBREC_SENT: E.PUBREC_SENT,
            E.RESEND_PUBREC_SENT: E.RESEND_PUBREC_SENT,
            E.PUBREC_HELD: E.PUBREC_HELD,
            E.RESEND_PUBREC_HELD: E.RESEND_PUBREC_HELD,
        },
        "answered with PUBREC ([MQTT-4.3.3-2]): again where this connection sent one, in its "
        "turn where it waits, with room taken (or held) for a carried exchange",
    ),
    (
        Step.ROOM,
        {E.PUBREC_HELD: E.PUBREC_SENT, E.RESEND_PUBREC_HELD: E.RESEND_PUBREC_SENT},
        "room in the window: the PUBREC goes out",
    ),
    (
        Step.RELEASED,
        {
            E.PUBREC_SENT: E.RELEASING_IN_WINDOW,
            E.RESEND_PUBREC_SENT: E.RELEASING_IN_WINDOW,
            E.STORED: E.RELEASING,
            E.PUBREC_HELD: E.RELEASING,
            E.RESEND_PUBREC_HELD: E.RELEASING,
            E.RELEASING: E.RELEASING,
            E.RELEASING_IN_WINDOW: E.RELEASING_IN_WINDOW,
        },
        "PUBREL; a PUBREC still held is not sent any more (the PUBREL answers it); a PUBREL "
        "again before PUBCOMP is released again",
    ),
    (
        Step.COMPLETED,
        {
            None: None,
            E.RELEASING: None,
            E.RELEASING_IN_WINDOW: None,
            **{state: state for state in _STORED_HERE},
        },
        "the release is stored: PUBCOMP (section 4.3.3); an exchange a faulty broker opened on "
        "the id before this PUBCOMP (stored first) keeps its state",
    ),
    (
        Step.CONNECTION_LOST,
        {
            **{state: E.STORED for state in _STORED_HERE},
            **{state: E.RELEASING for state in _RELEASED},
        },
        "the connection is gone: what a new connection makes of each state (section 4.4)",
    ),
    (
        Step.SESSION_LOST,
        {
            **{state: None for state in _STORED_HERE},
            **{state: state for state in _RELEASED},
        },
        "the broker holds no session (section 3.2.2.2): no PUBREL will come for stored ids",
    ),
    (
        Step.ID_REUSED,
        {state: None for state in _STORED_HERE},
        "the broker gave the id to another message (a broker fault, section 2.3.1)",
    ),
)

TRANSITIONS: dict[tuple[Exchange | None, str], Exchange | None] = {
    (was, step): to for step, edges, _ in _WHY for was, to in edges.items()
}
"""Every step an exchange may take, (state before, step) -> state after; ``None``: no
exchange open on the id. A target that takes room in the window (``room``) becomes its
``held`` twin when the window is full; a pair not here raises :class:`IllegalTransition`."""

WHY: dict[str, str] = {step: why for step, _, why in _WHY}
"""Why each step goes where the table says, for readers of the table."""

_ILLEGAL = cast(Exchange, object())
"""What a step not in the table looks up to (no state: compared by identity)."""
_STEP_STORED, _STEP_RELEASED, _STEP_COMPLETED = Step.STORED, Step.RELEASED, Step.COMPLETED
_STEP_ROOM = Step.ROOM
_NEW_STORED = cast(Exchange, TRANSITIONS[(None, Step.STORED)])
"""Where a new exchange goes when stored: PUBREC_SENT (its held twin without room)."""


def _illegal(packet_id: int, state: Exchange | None, step: str) -> IllegalTransition:
    return IllegalTransition(
        f"QoS 2 exchange {packet_id}: step {step!r} is not allowed from "
        f"{state.name if state is not None else 'no exchange'}"
    )


E.PUBREC_SENT.held_twin = E.PUBREC_HELD
E.RESEND_PUBREC_SENT.held_twin = E.RESEND_PUBREC_HELD
_NEW_HELD = cast(Exchange, _NEW_STORED.held_twin)
_FROM_NONE: dict[str, Exchange | None] = {}
for (_was, _step), _to in TRANSITIONS.items():
    (_FROM_NONE if _was is None else _was.next)[_step] = _to


class Exchanges:
    """The inbound QoS 2 exchanges of one session, by packet id, and the PUBREC window of
    ``window`` exchanges (0: no limit; the session's ``pubrec_window``)."""

    __slots__ = ("pubrecs_held", "queue", "room_taken", "states", "window")

    def __init__(self, window: int = 0) -> None:
        self.window = window
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

    # ------------------------------------------------------------------ events

    def stored(self, packet_id: int) -> bool:
        """The caller stored a delivery of this connection; whether its PUBREC goes out now
        (False: held for room, or an id restored meanwhile whose resend gets it). On every
        QoS 2 message's path, so the table is read and ``_move``'s bookkeeping done inline
        for a new exchange."""
        states = self.states
        state = states.get(packet_id)
        if state is None:
            to = _NEW_STORED
            window = self.window
            if not window or (not self.queue and self.room_taken < window):
                states[packet_id] = to
                self.room_taken += 1
                return True
            states[packet_id] = _NEW_HELD  # no room: it waits, in order
            self.queue[packet_id] = None
            self.pubrecs_held += 1
            return False
        else:
            found = state.next.get(_STEP_STORED, _ILLEGAL)
            if found is _ILLEGAL:
                raise _illegal(packet_id, state, Step.STORED)
            if found is state or found is None:
                return False
            to = found
        if to.room and (state is None or not state.room) and not self.has_room():
            to = cast(Exchange, to.held_twin)
        self._move(packet_id, state, to)
        return to.room

    def stored_late(self, packet_id: int) -> None:
        """Stored when no PUBREC can be written on the connection it came on (gone), or
        restored after a restart: the broker's resend gets the PUBREC."""
        state = self.states.get(packet_id)
        self._move(packet_id, state, self._to(packet_id, state, Step.STORED_LATE))

    def resent(self, packet_id: int) -> bool:
        """The broker resent the PUBLISH of stored exchange ``packet_id``; whether a PUBREC
        answers it now (False: it waits for room, in its turn)."""
        state = self.states.get(packet_id)
        to = self._to(packet_id, state, Step.RESENT)
        if to is not state and to is not None and to.room and not self.has_room():
            to = cast(Exchange, to.held_twin)
        self._move(packet_id, state, to)
        return to is not None and to.room

    def released(self, packet_id: int) -> bool:
        """PUBREL for ``packet_id``; whether an exchange was open (False: the id is unknown,
        and PUBCOMP may go at once, section 4.3.3)."""
        states = self.states
        state = states.get(packet_id)
        if state is None:
            return False
        to = state.next.get(_STEP_RELEASED, _ILLEGAL)
        if to is _ILLEGAL or to is None:
            raise _illegal(packet_id, state, Step.RELEASED)
        if to.room is state.room and not state.held:  # the window is as it was: inline
            states[packet_id] = to
        else:
            self._move(packet_id, state, to)
        return True

    def completed(self, packet_id: int) -> Sequence[int]:
        """The caller stored the release of ``packet_id`` (its PUBCOMP goes out); returns the
        held ids whose PUBREC the freed room lets out, oldest first (section 4.6)."""
        states = self.states
        state = states.get(packet_id)
        to = (_FROM_NONE if state is None else state.next).get(_STEP_COMPLETED, _ILLEGAL)
        if to is _ILLEGAL:
            raise _illegal(packet_id, state, Step.COMPLETED)
        if to is None and state is not None and state.room:  # the common end: inline
            del states[packet_id]
            self.room_taken -= 1
        else:
            self._move(packet_id, state, to)
        queue = self.queue
        window = self.window
        if not queue or (window and self.room_taken >= window):
            return ()
        freed: list[int] = []
        while queue and (not window or self.room_taken < window):
            oldest = next(iter(queue))
            held = states[oldest]
            room = held.next.get(_STEP_ROOM, _ILLEGAL)
            if room is _ILLEGAL or room is None:
                raise _illegal(oldest, held, Step.ROOM)
            del queue[oldest]  # _move's bookkeeping for held -> room, inlined
            states[oldest] = room
            self.room_taken += 1
            freed.append(oldest)
        return freed

    def completed_offline(self, packet_id: int) -> None:
        """The release of ``packet_id`` is stored while no connection can carry PUBCOMP: the
        exchange ends all the same (the broker's PUBREL again meets an unknown id)."""
        state = self.states.get(packet_id)
        self._move(packet_id, state, self._to(packet_id, state, Step.COMPLETED))

    def id_reused(self, packet_id: int) -> None:
        """A broker fault: the broker gave stored exchange ``packet_id``'s id to another
        message (section 2.3.1), which takes the id."""
        state = self.states.get(packet_id)
        self._move(packet_id, state, self._to(packet_id, state, Step.ID_REUSED))

    def connection_lost(self) -> None:
        """The connection is gone: every exchange takes the state a new connection finds."""
        for packet_id, state in list(self.states.items()):
            self._move(packet_id, state, self._to(packet_id, state, Step.CONNECTION_LOST))

    def session_lost(self) -> tuple[int, ...]:
        """The broker holds no session (section 3.2.2.2) and will send no PUBREL for stored
        ids: their exchanges end; returns their ids, in order."""
        forgotten = tuple(sorted(pid for pid, st in self.states.items() if not st.released))
        for packet_id in forgotten:
            state = self.states[packet_id]
            self._move(packet_id, state, self._to(packet_id, state, Step.SESSION_LOST))
        return forgotten

    def restored(self, packet_ids: Iterable[int]) -> None:
        """Ids stored by an earlier process whose PUBREL it never stored: each is STORED; an
        id whose exchange is known already keeps its state."""
        for packet_id in packet_ids:
            if packet_id not in self.states:
                self.stored_late(packet_id)

    # ------------------------------------------------------------------ the window

    def has_room(self) -> bool:
        """Whether a new PUBREC may go out now: no window, or none held before it and fewer
        than ``window`` exchanges of this connection awaiting PUBCOMP."""
        window = self.window
        return not window or (not self.queue and self.room_taken < window)

    # ------------------------------------------------------------------ the one move

    @staticmethod
    def _to(packet_id: int, state: Exchange | None, step: str) -> Exchange | None:
        """The state ``step`` leads to from ``state``, as :data:`TRANSITIONS` says."""
        to = (_FROM_NONE if state is None else state.next).get(step, _ILLEGAL)
        if to is _ILLEGAL:
            raise _illegal(packet_id, state, step)
        return to

    def _move(self, packet_id: int, was: Exchange | None, to: Exchange | None) -> None:
        """Put the exchange of ``packet_id`` from ``was`` in state ``to`` (None: closed),
        keeping ``room_taken`` and ``queue`` in step with the states."""
        if was is to:
            return
        states = self.states
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
