"""Inbound QoS 2 exchanges have one state per packet id, changed in one place
(``Exchanges.move``) and only along the edges of ``TRANSITIONS``: the steps of section 4.3.3
(method B), what a new connection carries over (section 4.4), and the broker faults the session
survives. The PUBREC window's room and queue always agree with the states."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from connector.mqtt.codec import encode, encode_publish
from connector.mqtt.exchanges import TRANSITIONS, Exchange, Exchanges
from connector.mqtt.packets import Connack, Pubcomp, Publish, Pubrec, Pubrel
from connector.mqtt.session import ClientSession, Released, SessionConfig, State

Move = tuple[Exchange | None, Exchange | None]
E = Exchange


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Move]]:
    """Every state change of every session, checked against TRANSITIONS and the window's
    bookkeeping as it happens."""
    seen: list[Move] = []
    move = Exchanges.move

    def checked(self: Exchanges, packet_id: int, to: Exchange | None) -> None:
        was = self.states.get(packet_id)
        move(self, packet_id, to)
        if was is not to:
            assert (was, to) in TRANSITIONS, f"{packet_id}: {was} -> {to} is not a transition"
            seen.append((was, to))
        assert self.room_taken == sum(state.room for state in self.states.values())
        assert set(self.queue) == {pid for pid, state in self.states.items() if state.held}

    monkeypatch.setattr(Exchanges, "move", checked)
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
    return dict(session._exchanges.states)


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
    assert session.open_pubrecs == 0 and not session._exchanges.queue
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
    assert list(session._exchanges.queue) == [31, 5, 30, 6]
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
    exchanges = Exchanges()
    for pid, state in [(1, E.PUBREC_SENT), (2, E.PUBREC_HELD), (3, E.RELEASING_IN_WINDOW)]:
        exchanges.move(pid, state)
    exchanges.move(4, E.STORED)
    assert (exchanges.room_taken, list(exchanges.queue), exchanges.pubrecs_held) == (2, [2], 1)
    exchanges.carry_over()
    assert exchanges.states == {1: E.STORED, 2: E.STORED, 3: E.RELEASING, 4: E.STORED}
    assert (exchanges.room_taken, list(exchanges.queue)) == (0, [])
    assert exchanges.forget_stored() == (1, 2, 4)
    assert exchanges.states == {3: E.RELEASING}


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


@pytest.mark.parametrize("seed", range(40))
def test_random_traffic_moves_only_along_the_transitions(moves: list[Move], seed: int) -> None:
    """Brokers that follow the standard and brokers that do not, a caller that stores,
    releases and loses connections at random: every move is an edge of TRANSITIONS (checked
    as it happens, with the window's room and queue)."""
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
