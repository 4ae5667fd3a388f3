"""The management API's HTTP surface in-process (aiohttp's test client over a real broker
with in-memory storage): health states, 405 with Allow on every known path, list paging."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp.test_utils import TestClient, TestServer

from pagemq.core.broker import Broker
from pagemq.core.settings import AddressSettingsRepository
from pagemq.integrations.admin_api import KNOWN_PATHS
from pagemq.integrations.http_api import make_app

Body = Callable[[TestClient, Broker, list[str]], Awaitable[None]]


def serve(body: Body) -> None:
    async def main() -> None:
        settings = AddressSettingsRepository()
        settings.add("#", {})
        broker = Broker(settings)
        state = ["starting"]
        app = make_app(broker, dict, connections=list, health=lambda: state[0])
        async with TestClient(TestServer(app)) as client:
            await body(client, broker, state)

    asyncio.run(main())


def test_health_is_503_until_ready_and_again_while_stopping_liveness_stays_200() -> None:
    async def body(client: TestClient, _broker: Broker, state: list[str]) -> None:
        for status, ready, live in (("starting", 503, 200), ("ready", 200, 200), ("stopping", 503, 200)):
            state[0] = status
            for path, expected in (("/health", ready), ("/health/ready", ready), ("/health/live", live)):
                response = await client.get(path)
                assert response.status == expected, (status, path)
                assert (await response.json())["status"] == status

    serve(body)


def test_every_known_path_answers_405_with_allow_for_a_method_it_does_not_take() -> None:
    async def body(client: TestClient, _broker: Broker, _state: list[str]) -> None:
        for path, methods in KNOWN_PATHS.items():
            concrete = path.replace("{name}", "x")
            wrong = next(m for m in ("PATCH", "PUT", "POST", "DELETE") if m not in methods)
            response = await client.request(wrong, concrete)
            assert response.status == 405, (wrong, path)
            assert set(methods) <= {m.strip() for m in response.headers["Allow"].split(",")}
            assert "error" in await response.json()

    serve(body)


def test_lists_page_sort_and_filter_and_count_the_total() -> None:
    async def body(client: TestClient, broker: Broker, _state: list[str]) -> None:
        for n in range(30):
            for _ in range(n % 5):
                broker.send(f"jobs.{n:02d}", "anycast", {}, b"x")
            broker.send(f"jobs.{n:02d}", "anycast", {}, b"x")
        broker.send("other", "anycast", {}, b"x")
        page = await (await client.get("/api/queues?filter=JOBS&offset=25&limit=10")).json()
        assert page["total"] == 30
        assert [q["name"] for q in page["queues"]] == [f"jobs.{n}" for n in range(25, 30)]
        top = await (await client.get("/api/addresses?sort=messages&order=desc&limit=6")).json()
        assert [a["messages"] for a in top["addresses"]] == [5] * 6
        assert (await client.get("/api/queues?sort=bogus")).status == 400
        every = await (await client.get("/api/queues")).json()
        assert every["total"] == 31 and every["limit"] is None and len(every["queues"]) == 31

    serve(body)
