"""A Queue in-process with a recording owner: what it hands back instead of calling into the
broker (auto acks, expired refs after a dispatch round, dead letters), and its order."""

from __future__ import annotations

from pagemq.core.consumer import AckMode, Consumer, MessageRef
from pagemq.core.message import Message
from pagemq.core.queue import Queue
from pagemq.core.settings import AddressSettings


class Owner:
    """Records what the queue reports; `movable` says which dead letters it can move."""

    def __init__(self, movable: bool = True) -> None:
        self.settled: list[int] = []
        self.expired_rounds: list[list[int]] = []
        self.dead: list[int] = []
        self.timed: list[int] = []
        self.returned: list[tuple[int, int]] = []  # (message id, delivery count) given back
        self.movable = movable
        self.queue: Queue | None = None

    def settle(self, queue: Queue, ref: MessageRef) -> None:
        self.settled.append(ref.message.message_id)

    def expired(self, queue: Queue, refs: list[MessageRef]) -> None:
        self.expired_rounds.append([r.message.message_id for r in refs])

    def dead_letter(self, queue: Queue, refs: list[MessageRef]) -> list[MessageRef]:
        if self.movable:
            self.dead.extend(r.message.message_id for r in refs)
            return []
        return refs

    def expires(self, queue: Queue, ref: MessageRef) -> None:
        self.timed.append(ref.message.message_id)

    def given_back(self, queue: Queue, refs: list[MessageRef]) -> None:
        self.returned.extend((r.message.message_id, r.delivery_count) for r in refs)


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[int, int]] = []

    def deliver(self, consumer: Consumer, ref: MessageRef, tag: int) -> None:
        self.got.append((ref.message.message_id, tag))


def _queue(owner: Owner, **settings: object) -> Queue:
    return Queue(owner, "a", AddressSettings.from_values(settings), 1, "q")


def _message(message_id: int, *, expiration: int = 0, priority: int = 4) -> Message:
    return Message(message_id, "a", {}, b"x", persistent=False, priority=priority,
                   expiration=expiration, timestamp=0)


def test_auto_acked_deliveries_are_settled_through_the_callable_the_consumer_was_handed() -> None:
    owner = Owner()
    queue = _queue(owner)
    sink = Sink()
    consumer = Consumer(sink, auto_settle=lambda ref: owner.settle(queue, ref), ack_mode=AckMode.AUTO)
    queue.add_consumer(consumer)
    for n in (1, 2, 3):
        queue.add(MessageRef(_message(n)))
    assert [m for m, _tag in sink.got] == [1, 2, 3]
    assert owner.settled == [1, 2, 3]
    assert not consumer.in_flight


def test_expired_refs_are_handed_over_after_the_dispatch_round_not_delivered() -> None:
    owner = Owner()
    queue = _queue(owner)
    for n, expiration in ((1, 1), (2, 0), (3, 1)):  # 1 ms after the epoch: long expired
        queue.add(MessageRef(_message(n, expiration=expiration)))
    assert owner.timed == [1, 3]  # only messages with an expiration are timed
    sink = Sink()
    queue.add_consumer(Consumer(sink, ack_mode=AckMode.INDIVIDUAL))
    assert [m for m, _tag in sink.got] == [2]
    assert owner.expired_rounds == [[1, 3]]
    assert queue.pending == 0


def test_spent_refs_go_to_the_owner_and_the_rest_return_in_order() -> None:
    owner = Owner()
    queue = _queue(owner, **{'max-delivery-attempts': 2})
    refs = [MessageRef(_message(n)) for n in (1, 2, 3)]
    refs[1].delivery_count = 2
    queue.return_refs(refs)
    assert owner.dead == [2]
    assert [r.message.message_id for r in queue] == [1, 3]


def test_spent_refs_the_owner_cannot_move_stay_in_their_place() -> None:
    owner = Owner(movable=False)
    queue = _queue(owner, **{'max-delivery-attempts': 2})
    refs = [MessageRef(_message(n)) for n in (1, 2, 3)]
    refs[1].delivery_count = 2
    queue.return_refs(refs)
    assert [r.message.message_id for r in queue] == [1, 2, 3]


def test_take_pending_takes_only_what_is_still_pending() -> None:
    owner = Owner()
    queue = _queue(owner)
    refs = [MessageRef(_message(n)) for n in range(100)]
    for ref in refs:
        queue.add(ref)
    sink = Sink()
    consumer = Consumer(sink, ack_mode=AckMode.INDIVIDUAL, prefetch=10)
    queue.add_consumer(consumer)  # takes 0..9 out of pending
    few = queue.take_pending([refs[0], refs[50], refs[50]])
    assert [r.message.message_id for r in few] == [50]
    many = queue.take_pending(refs[:80])  # the one-pass path
    assert [r.message.message_id for r in many] == [n for n in range(10, 80) if n != 50]
    assert queue.pending == 20
    assert [r.message.message_id for r in queue] == list(range(80, 100))
