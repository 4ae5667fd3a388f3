"""The SENDs of one socket read to a paging address are appended together: one append and
one write for all of them (each still its own page frame, so damage costs one), each
RECEIPT still after that write is durable, and
nothing else the read carries (another frame, another address, a duplicate id, a page
limit) sees a message routed but not yet appended. A real StompSession and Broker on a
real event loop, pages in memory (`MemoryPagedQueueStore`), no socket."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from session_harness import RecordingTransport, frame

from pagemq.core.broker import Broker
from pagemq.core.selector.summary import PageSummary
from pagemq.core.settings import AddressSettings, AddressSettingsRepository
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.server.stomp_session import StompSession
from pagemq.storage.api import MemoryStore
from pagemq.storage.paging.memory_queue_store import MemoryPagedQueueStore, MemoryPages
from pagemq.storage.paging.page_format import PagedRecord
from pagemq.storage.paging.queue_store import CursorRecords, PagedQueueStore


class HeldPages(MemoryPages):
    """Records each append's size; a persistent append is durable when the test says."""

    def __init__(self, address: str, *, page_size_bytes: int) -> None:
        super().__init__(address, page_size_bytes=page_size_bytes)
        self.appends: list[int] = []
        self.atomic: list[bool] = []
        self.held: list[asyncio.Future[None]] = []
        self.refuse: OSError | None = None

    def append(self, records: Sequence[PagedRecord], *, summary_input: Sequence[object] | None = None,
               atomic: bool = True) -> tuple[int, int, asyncio.Future[None] | None]:
        if self.refuse is not None:
            raise self.refuse
        page_no, first, durable = super().append(records, summary_input=summary_input, atomic=atomic)
        self.appends.append(len(records))
        self.atomic.append(atomic)
        if durable is not None:
            durable = asyncio.get_running_loop().create_future()
            self.held.append(durable)
        return page_no, first, durable

    def sync(self) -> None:
        held, self.held = self.held, []
        for future in held:
            future.set_result(None)


class Client:
    """A broker whose addresses all page, and one connected session on the running loop."""

    def __init__(self, **settings: object) -> None:
        repository = AddressSettingsRepository()
        repository.add("#", {"max-size-bytes": 0, **settings})
        self.pages: dict[str, HeldPages] = {}

        def queue_store(name: str, address: AddressSettings, records: CursorRecords) -> PagedQueueStore:
            pages = self.pages[name] = HeldPages(name, page_size_bytes=address.page_size_bytes)
            pages.set_summary_builder(PageSummary)
            return MemoryPagedQueueStore(pages, records, summaries=PageSummary.from_bytes)

        store = MemoryStore()
        loop = asyncio.get_running_loop()
        store.start(loop)
        self.broker = Broker(repository, store=store, queue_stores=queue_store)
        self.transport = RecordingTransport()
        self.session = StompSession(self.broker, StompConnection(), self.transport, loop)
        self.transport.session = self.session
        self.session.receive(frame("CONNECT", {"accept-version": "1.2", "host": "x"}))

    def read(self, *frames: bytes) -> None:
        """Frames that arrive in one socket read."""
        self.session.receive(b"".join(frames))

    def receipts(self) -> list[str]:
        return [f.headers["receipt-id"] for f in self.transport.frames() if f.command == "RECEIPT"]

    def errors(self) -> list[str]:
        return [f.headers.get("message", "") for f in self.transport.frames() if f.command == "ERROR"]

    def sync(self) -> None:
        for pages in self.pages.values():
            pages.sync()

    def bodies(self, queue: str) -> list[str]:
        """Every message of `queue`, in the order a consumer gets them."""
        self.read(frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": queue, "ack": "auto"}))
        return [f.body.decode() for f in self.transport.messages()
                if f.headers.get("subscription") == queue]


def send(queue: str, body: str, receipt: str | None = None, **headers: str) -> bytes:
    more = {"receipt": receipt} if receipt is not None else {}
    return frame("SEND", {"destination": f"/queue/{queue}", "persistent": "true", **more, **headers}, body)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_sends_of_one_read_are_one_append_and_each_receipt_waits_for_it() -> None:
    async def body() -> None:
        client = Client()
        client.read(*(send("q", f"m{n}", receipt=f"r{n}") for n in range(5)))
        assert client.pages["q"].appends == [5]
        assert client.pages["q"].atomic == [False]  # a frame each: damage costs one message
        await settle()
        assert client.receipts() == []  # the batch is not durable yet
        client.sync()
        await settle()
        assert client.receipts() == [f"r{n}" for n in range(5)]
        assert client.bodies("q") == [f"m{n}" for n in range(5)]

    run(body)


def test_another_frame_between_sends_ends_the_group_first() -> None:
    async def body() -> None:
        client = Client()
        client.read(send("q", "m0"), send("q", "m1"),
                    frame("SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "client"}),
                    send("q", "m2"), send("q", "m3"))
        assert client.pages["q"].appends == [2, 2]
        client.sync()
        await settle()
        assert [f.body for f in client.transport.messages()] == [b"m0", b"m1", b"m2", b"m3"]

    run(body)


def test_sends_to_two_addresses_in_one_read_keep_each_address_in_order() -> None:
    async def body() -> None:
        client = Client()
        client.read(send("a", "a0"), send("a", "a1"), send("b", "b0"), send("a", "a2"), send("b", "b1"))
        assert client.pages["a"].appends == [2, 1]
        assert client.pages["b"].appends == [1, 1]
        client.sync()
        assert client.bodies("a") == ["a0", "a1", "a2"]
        assert client.bodies("b") == ["b0", "b1"]

    run(body)


def test_a_group_is_cut_at_256_kib_of_bodies() -> None:
    async def body() -> None:
        client = Client(**{"page-size-bytes": "10MiB"})
        big = "x" * 100_000
        client.read(*(send("q", big + str(n)) for n in range(5)))
        assert client.pages["q"].appends == [2, 2, 1]
        client.sync()
        assert [b[-1] for b in client.bodies("q")] == ["0", "1", "2", "3", "4"]

    run(body)


def test_a_send_with_a_duplicate_id_is_stored_after_the_sends_before_it() -> None:
    async def body() -> None:
        client = Client()
        client.read(send("q", "m0"), send("q", "m1", _AMQ_DUPL_ID="d1"), send("q", "m2"),
                    send("q", "m1 again", _AMQ_DUPL_ID="d1"))
        client.sync()
        await settle()  # m1's page batch is committed by the journal once its write is done
        assert client.bodies("q") == ["m0", "m1", "m2"]

    run(body)


def test_a_page_limit_counts_the_sends_grouped_before_it() -> None:
    async def body() -> None:
        client = Client(**{"page-limit-messages": 3, "page-full-policy": "FAIL"})
        client.read(*(send("q", f"m{n}", receipt=f"r{n}") for n in range(5)))
        client.sync()
        await settle()
        assert client.receipts() == ["r0", "r1", "r2"]
        assert client.errors() and "page limit" in client.errors()[0]
        assert client.broker.queue_info("q")["messages"] == 3

    run(body)


def test_a_failed_append_fails_every_send_of_the_group_and_stores_none() -> None:
    async def body() -> None:
        client = Client()
        client.read(send("q", "m0"))  # the address and its page store exist
        client.sync()
        client.pages["q"].refuse = OSError(28, "No space left on device")
        client.read(*(send("q", f"m{n}", receipt=f"r{n}") for n in range(1, 4)))
        await settle()
        assert client.receipts() == []
        assert client.errors() == ["message could not be stored: [Errno 28] No space left on device"]
        assert client.broker.queue_info("q")["messages"] == 1

    run(body)


def test_non_persistent_sends_are_grouped_and_receipted_once_appended() -> None:
    async def body() -> None:
        client = Client()
        client.read(*(frame("SEND", {"destination": "/queue/q", "receipt": f"r{n}"}, f"m{n}")
                      for n in range(3)))
        assert client.pages["q"].appends == [3]
        await settle()
        assert client.receipts() == ["r0", "r1", "r2"]

    run(body)


def test_a_burst_of_small_sends_keeps_each_page_within_page_size_bytes() -> None:
    async def body() -> None:
        client = Client(**{"page-size-bytes": "16KiB"})
        client.read(*(send("q", f"m{n}".ljust(1000, "x")) for n in range(60)))
        client.sync()
        pages = client.pages["q"]
        sizes = [page.size for page in pages.pages()]
        assert len(sizes) >= 4 and max(sizes) <= 16 * 1024
        assert min(sizes[:-1]) > 12 * 1024  # and each (but the live one) is well filled
        assert len(pages.appends) < 20  # still a few appends, not one per SEND
        assert [b.rstrip("x") for b in client.bodies("q")] == [f"m{n}" for n in range(60)]

    run(body)
