"""Inbound QoS 2 exchanges have one state per packet id, moved by events (``Exchanges.stored``,
``resent``, ``released``, ``completed``, ...) along a table that decides (``TRANSITIONS``): the
steps of section 4.3.3 (method B), what a new connection carries over (section 4.4), and the
broker faults the session survives. A step the table does not allow raises. The PUBREC
window's room and queue always agree with the states."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.events import Released
from connector.mqtt.exchanges import (
    TRANSITIONS,
    WHY,
    Exchange,
    Exchanges,
    IllegalTransition,
    Step,
)
from connector.mqtt.packets import Connack, Pubcomp, Publish, Pubrec, Pubrel
from connector.mqtt.session import ClientSession, State

Move = tuple[Exchange | None, Exchange | None]
E = Exchange
STEPS = [v for k, v in vars(Step).items() if k.isupper()]
HELD_TWIN = {E.PUBREC_SENT: E.PUBREC_HELD, E.RESEND_PUBREC_SENT: E.RESEND_PUBREC_HELD}


STEP_METHODS = (
    "stored",
    "stored_late",
    "resent",
    "released",
    "completed",
    "completed_offline",
    "id_reused",
    "connection_lost",
    "session_lost",
)


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Move]]:
    """Every state change of every session, checked as it happens: each change a step method
    makes is a step of TRANSITIONS (or its held twin, when the window is full), and the
    window's bookkeeping agrees with the states after it."""
    seen: list[Move] = []
    allowed = set(TRANSITIONS.items())

    def checked(method: Callable[..., object]) -> Callable[..., object]:
        def step(self: Exchanges, *args: object) -> object:
            before = dict(self.states)
            result = method(self, *args)
            for pid in set(before) | set(self.states):
                was, to = before.get(pid), self.states.get(pid)
                if was is not to:
                    assert any(
                        b is was and (a is to or HELD_TWIN.get(a) is to)  # type: ignore[arg-type]
                        for (b, _), a in allowed
                    ), f"{pid}: {was} -> {to} is no step of the table"
                    seen.append((was, to))
            assert self.room_taken == sum(state.room for state in self.states.values())
            assert set(self.queue) == {pid for pid, state in self.states.items() if state.held}
            return result

        return step

    for name in STEP_METHODS:
        monkeypatch.setattr(Exchanges, name, checked(getattr(Exchanges, name)))
    yield seen


def wire(*packets: object) -> bytes:
    return b"".join(encode(p) for p in packets)  # type: ignore[arg-type]


def connected(window: int = 256, present: bool = True, **kwargs: object) -> ClientSession:
    session = ClientSession(SessionConfig("c", pubrec_window=window), **kwargs)  # type: ignore[arg-type]
    reconnect(session, present)
    return session


def reconnect(session: ClientSession, present: bool = True) -> None:
    session.connect(0.0)
    session.receive_data(encode(Connack(present, 0)), 0.0)
    session.data_to_send()


def states(session: ClientSession) -> dict[int, Exchange]:
    return dict(session._inbound.exchanges.states)


def test_a_message_goes_stored_pubrec_released_completed(moves: list[Move]) -> None:
    session = connected()
    message = Publish("t", b"m", 2, packet_id=7)
    assert session.receive_data(encode(message), 1.0) == [message]
    assert states(session) == {}, "delivered, not stored: the caller's"
    session.ack(message, 1.0)
    assert session.data_to_send() == wire(Pubrec(7))
    assert session.receive_data(wire(Pubrel(7)), 2.0) == [Released(7)]
    session.complete(7, 2.0)
    assert session.data_to_send() == wire(Pubcomp(7))
    assert moves == [
        (None, E.PUBREC_SENT),
        (E.PUBREC_SENT, E.RELEASING_IN_WINDOW),
        (E.RELEASING_IN_WINDOW, None),
    ]


def test_a_new_connection_carries_stored_and_released_exchanges_over(moves: list[Move]) -> None:
    session = connected(window=1)
    messages = [Publish("t", bytes([n]), 2, packet_id=n) for n in (1, 2, 3)]
    session.receive_data(wire(*messages), 1.0)
    session.ack_many(messages, 1.0)
    session.receive_data(wire(Pubrel(1)), 1.0)
    assert states(session) == {1: E.RELEASING_IN_WINDOW, 2: E.PUBREC_HELD, 3: E.PUBREC_HELD}
    session.connection_lost()
    assert states(session) == {1: E.RELEASING, 2: E.STORED, 3: E.STORED}
    assert session.open_pubrecs == 0 and not session._inbound.exchanges.queue
    reconnect(session)
    resent = [Publish(m.topic, m.payload, 2, dup=True, packet_id=m.packet_id) for m in messages]
    assert session.receive_data(wire(Pubrel(1), *resent[1:]), 2.0) == [Released(1)]
    assert session.data_to_send() == wire(Pubrec(2)), "1 holds no room on this connection"
    assert states(session) == {1: E.RELEASING, 2: E.RESEND_PUBREC_SENT, 3: E.RESEND_PUBREC_HELD}
    session.complete(1, 3.0)
    assert session.data_to_send() == wire(Pubcomp(1))
    assert (E.RESEND_PUBREC_HELD, E.RESEND_PUBREC_SENT) not in moves
    session.receive_data(wire(Pubrel(2)), 3.0)
    session.complete(2, 3.0)
    assert session.data_to_send() == wire(Pubcomp(2), Pubrec(3))
    assert (E.RESEND_PUBREC_HELD, E.RESEND_PUBREC_SENT) in moves


def test_held_pubrecs_go_out_in_the_order_they_were_held(moves: list[Move]) -> None:
    """New deliveries and resends of carried exchanges share the window's queue, in order."""
    session = connected(window=1)
    session.restore_qos2_pending([30, 31])
    first = Publish("t", b"0", 2, packet_id=1)
    session.receive_data(encode(first), 1.0)
    session.ack(first, 1.0)
    news = [Publish("t", bytes([n]), 2, packet_id=n) for n in (5, 6)]
    resends = [Publish("t", bytes([n]), 2, dup=True, packet_id=n) for n in (31, 30)]
    session.receive_data(wire(news[0], resends[0]), 2.0)  # 31 waits before 5 is stored
    session.ack(news[0], 2.0)
    session.receive_data(wire(resends[1], news[1]), 2.0)
    session.ack(news[1], 2.0)
    assert session.data_to_send() == wire(Pubrec(1))
    assert list(session._inbound.exchanges.queue) == [31, 5, 30, 6]
    order = []
    for pid in (1, 31, 5, 30, 6):
        session.receive_data(wire(Pubrel(pid)), 3.0)
        session.complete(pid, 3.0)
        sent = session.data_to_send()
        order += [sent[i + 2] << 8 | sent[i + 3] for i in range(4, len(sent), 4)]
    assert order == [31, 5, 30, 6]
    assert states(session) == {}


def test_a_pubrel_for_a_held_exchange_takes_it_out_of_the_queue(moves: list[Move]) -> None:
    session = connected(window=1)
    messages = [Publish("t", bytes([n]), 2, packet_id=n) for n in (1, 2, 3)]
    session.receive_data(wire(*messages), 1.0)
    session.ack_many(messages, 1.0)
    assert session.data_to_send() == wire(Pubrec(1))
    assert session.receive_data(wire(Pubrel(2)), 2.0) == [Released(2)]
    assert states(session)[2] is E.RELEASING
    session.receive_data(wire(Pubrel(1)), 2.0)
    session.complete(1, 2.0)
    assert session.data_to_send() == wire(Pubcomp(1), Pubrec(3)), "no PUBREC after PUBREL 2"
    session.complete(2, 2.0)
    assert session.data_to_send() == wire(Pubcomp(2))


def test_a_pending_id_given_to_another_message_gets_no_pubrec_before_it_is_stored(
    moves: list[Move],
) -> None:
    """The exchange the broker abandoned leaves the window; the new message's PUBREC waits
    for the caller's store, whatever room a PUBCOMP frees meanwhile."""
    session = connected(window=1, matches_stored=lambda m: m.payload in (b"a", b"b"))
    a, b = Publish("t", b"a", 2, packet_id=1), Publish("t", b"b", 2, packet_id=2)
    session.receive_data(wire(a, b), 1.0)
    session.ack_many([a, b], 1.0)
    assert session.data_to_send() == wire(Pubrec(1))
    other = Publish("t", b"other", 2, dup=True, packet_id=2)
    assert session.receive_data(encode(other), 2.0) == [other]
    assert (E.PUBREC_HELD, None) in moves
    session.receive_data(wire(Pubrel(1)), 3.0)
    session.complete(1, 3.0)
    assert session.data_to_send() == wire(Pubcomp(1))
    session.ack(other, 4.0)
    assert session.data_to_send() == wire(Pubrec(2))


def test_exchanges_carry_over_and_forget() -> None:
    exchanges = Exchanges(window=1)
    assert exchanges.stored(1) is True
    assert exchanges.stored(2) is False  # held: the window of 1 is full
    assert exchanges.stored(3) is False
    assert exchanges.released(3) and exchanges.states[3] is E.RELEASING
    exchanges.stored_late(4)
    assert (exchanges.room_taken, list(exchanges.queue), exchanges.pubrecs_held) == (1, [2], 2)
    exchanges.connection_lost()
    assert exchanges.states == {1: E.STORED, 2: E.STORED, 3: E.RELEASING, 4: E.STORED}
    assert (exchanges.room_taken, list(exchanges.queue)) == (0, [])
    assert exchanges.session_lost() == (1, 2, 4)
    assert exchanges.states == {3: E.RELEASING}


def test_the_pubcomp_that_frees_room_lets_out_the_oldest_held_pubrec() -> None:
    exchanges = Exchanges(window=1)
    exchanges.stored(1)
    exchanges.stored(2)
    exchanges.stored(3)
    exchanges.released(1)
    assert list(exchanges.completed(1)) == [2]
    assert exchanges.states == {2: E.PUBREC_SENT, 3: E.PUBREC_HELD}
    assert list(exchanges.completed(9)) == []  # an unknown id: PUBCOMP, nothing moves


@pytest.mark.parametrize(
    ("setup", "step"),
    [
        (lambda x: x.stored(5), lambda x: x.stored(5)),  # PUBREC_SENT stored again
        (lambda x: None, lambda x: x.resent(5)),  # no exchange to resend
        (lambda x: (x.stored(5), x.released(5)), lambda x: x.resent(5)),
        (lambda x: (x.stored(5), x.released(5)), lambda x: x.id_reused(5)),
        (lambda x: None, lambda x: x.id_reused(5)),
    ],
    ids=["stored-twice", "resent-unknown", "resent-released", "reuse-released", "reuse-none"],
)
def test_a_step_the_table_does_not_allow_raises(
    setup: Callable[[Exchanges], object], step: Callable[[Exchanges], object]
) -> None:
    exchanges = Exchanges()
    setup(exchanges)
    before = dict(exchanges.states)
    with pytest.raises(IllegalTransition, match=r"QoS 2 exchange 5: step '[a-z ]+' is not allowed"):
        step(exchanges)
    assert exchanges.states == before  # nothing moved


def test_the_table_names_every_step_and_reaches_every_state() -> None:
    assert {step for _, step in TRANSITIONS} == set(STEPS) == set(WHY)
    assert set(TRANSITIONS.values()) | set(HELD_TWIN.values()) == {*Exchange, None}
    # The steps that close an exchange, and only those, lead to None.
    closing = {step for (_, step), to in TRANSITIONS.items() if to is None}
    assert closing == {Step.COMPLETED, Step.SESSION_LOST, Step.ID_REUSED}


def _random_broker(rnd: random.Random) -> bytes:
    """PUBLISHes (some resends, some reusing ids, QoS 1 among them) and PUBRELs."""
    data = b""
    for _ in range(rnd.randint(1, 4)):
        pid = rnd.randint(1, 6)
        if rnd.random() < 0.3:
            data += encode(Pubrel(pid))
        else:
            qos = rnd.choice((1, 2, 2))
            payload = bytes([rnd.randint(0, 2)])
            data += encode_publish("t", payload, qos, pid, dup=rnd.random() < 0.5)
    return data


@pytest.mark.parametrize("seed", range(int(os.environ.get("EXCHANGE_SEEDS", "40"))))
def test_random_traffic_moves_only_along_the_transitions(moves: list[Move], seed: int) -> None:
    """Brokers that follow the standard and brokers that do not, a caller that stores,
    releases and loses connections at random: no step is refused by the table, and every move
    is one of its steps (checked as it happens, with the window's room and queue). More seeds:
    EXCHANGE_SEEDS=3000."""
    rnd = random.Random(seed)
    config = SessionConfig(
        "c", pubrec_window=rnd.choice((0, 1, 2, 256)), max_violations_in_a_row=1_000
    )
    session = ClientSession(config, matches_stored=lambda m: m.payload != b"\x02")
    reconnect(session)
    session.restore_qos2_pending(rnd.sample(range(1, 7), 2))
    delivered: list[Publish] = []
    released: list[int] = []
    for _ in range(80):
        if session.state is not State.CONNECTED:
            session.connection_lost()
            reconnect(session, present=rnd.random() < 0.9)
        step = rnd.random()
        if step < 0.5:
            for event in session.receive_data(_random_broker(rnd), 1.0):
                if isinstance(event, Publish):
                    delivered.append(event)
                elif isinstance(event, Released):
                    released.append(event.packet_id)
        elif step < 0.8:
            cut = rnd.randint(0, len(released))
            session.complete_many(released[:cut], 2.0)
            del released[:cut]
            cut = rnd.randint(0, len(delivered))
            session.ack_many(delivered[:cut], 2.0)
            del delivered[:cut]
        else:
            session.connection_lost()
            if rnd.random() < 0.5:
                session.complete_many(released, 2.0)
                session.ack_many(delivered, 2.0)
            released.clear()
            delivered.clear()
        session.data_to_send()
    assert moves, "the run moved exchanges"
