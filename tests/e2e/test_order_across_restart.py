"""FIFO per producer across a restart, journal and page messages interleaved."""

from __future__ import annotations

import time

import pytest
from brokerproc import StompClient, now_ms, run_cli, unique
from test_paging_helpers import (
    body,
    durable,
    labels,
    take,
    wait_address,
    wait_frames,
    wait_no_page_files,
)

P = {"persistent": "true"}
SIZE = 200


def _cfg(**kw):
    return {"address-settings": {"#": {"page-size-bytes": "8KiB", "max-size-messages": 4, **kw}}}


def _send(p: StompClient, dest: str, names, headers_of=None) -> None:
    for n, name in enumerate(names):
        last = n == len(names) - 1
        hdrs = {**P, **(headers_of(name) if headers_of else {})}
        p.send(dest, body(name, SIZE), headers=hdrs, receipt=last)


def _interleave(proc, p: StompClient, connect, dest: str, rounds: int = 3, per: int = 12,
                headers_of=None, sub_headers=None) -> list[str]:
    """Send `per` messages (a few held in memory, the rest paged), let a holder read all
    it can without acking (cursor reads the backlog; the address may leave paging), close
    it (everything goes back), repeat. Returns the names in send order."""
    sent: list[str] = []
    for r in range(rounds):
        names = [f"r{r}_{k}" for k in range(per)]
        _send(p, dest, names, headers_of)
        sent += names
        holder = connect(proc)
        holder.subscribe(dest, ack="client-individual",
                         headers={"activemq.prefetchSize": 10_000, **(sub_headers or {})})
        time.sleep(0.4)
        holder.drop()
        time.sleep(0.2)
    return sent


def _drain(client: StompClient, dest: str, count: int, headers=None, timeout=20.0) -> list[str]:
    client.subscribe(dest, ack="client-individual",
                     headers={"activemq.prefetchSize": 3, **(headers or {})})
    return take(client, count, timeout=timeout, settle=0.5)


def _take_some(client: StompClient, dest: str, count: int) -> list[str]:
    """Take and ack the first `count` messages (prefetch 1), then disconnect."""
    client.subscribe(dest, ack="client-individual", headers={"activemq.prefetchSize": 1})
    listener = client.listener
    for n in range(count):
        listener.wait(lambda n=n: len(listener.messages) > n, 10, f"message {n}")
        client.ack(listener.messages[n], receipt=(n == count - 1))
    got = labels(listener.messages[:count])
    client.disconnect()
    return got


def _assert_empty(proc, queue: str, address: str | None = None) -> None:
    proc.wait_queue(queue, messages=0, messages_in_memory=0, messages_paged=0, timeout=10)
    address = address or queue
    wait_address(proc, address, paging=False, timeout=10)
    wait_no_page_files(proc, address)


def _check_clean(proc) -> None:
    proc.stop()
    result = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem")]
    assert result.returncode == 0 and not problems, result.stdout[-3000:]


def _counts(proc, queue):
    info = proc.queue(queue)
    return info["messages"], info["messages_in_memory"], info["messages_paged"]


# -- plain queue, clean and kill -------------------------------------------------------------


def _plain(start_broker, stomp_client, kill: bool, second: bool = False, **kw):
    proc = start_broker(_cfg(**kw))
    q = unique("fifo")
    dest = f"/queue/{q}"
    p = stomp_client(proc)
    sent = _interleave(proc, p, stomp_client, dest)
    before = _counts(proc, q)
    assert before[0] == len(sent), before
    proc.restart(kill=kill)
    after = _counts(proc, q)
    assert after[0] == len(sent), (before, after)
    assert after[1] + after[2] == after[0], after
    if second:
        assert _take_some(stomp_client(proc), dest, 5) == sent[:5]
        sent = sent[5:]
        _send(stomp_client(proc), dest, ["x0", "x1", "x2"])
        sent += ["x0", "x1", "x2"]
        proc.restart(kill=not kill)
        assert _counts(proc, q)[0] == len(sent)
    c = stomp_client(proc)
    assert _drain(c, dest, len(sent)) == sent
    _assert_empty(proc, q)
    return proc


@pytest.mark.slow  # make test-slow
def test_fifo_interleaved_memory_and_pages_clean_restart(start_broker, stomp_client):
    _check_clean(_plain(start_broker, stomp_client, kill=False))


@pytest.mark.slow  # make test-slow
def test_fifo_interleaved_memory_and_pages_kill(start_broker, stomp_client):
    _check_clean(_plain(start_broker, stomp_client, kill=True))


@pytest.mark.slow  # make test-slow
def test_fifo_second_restart_before_draining(start_broker, stomp_client):
    _check_clean(_plain(start_broker, stomp_client, kill=False, second=True))


@pytest.mark.slow  # make test-slow
def test_fifo_second_restart_before_draining_kill_first(start_broker, stomp_client):
    _check_clean(_plain(start_broker, stomp_client, kill=True, second=True))


@pytest.mark.slow  # make test-slow
def test_fifo_read_limits(start_broker, stomp_client):
    for limit in (1, 2, 3):
        _plain(start_broker, stomp_client, kill=limit == 2, **{"max-read-page-messages": limit}).stop()


# -- selectors -------------------------------------------------------------------------------


@pytest.mark.slow  # make test-slow
def test_fifo_selective_consumers_after_restart(start_broker, stomp_client):
    proc = start_broker(_cfg(**{"max-read-page-messages": 2}))
    q = unique("sel")
    dest = f"/queue/{q}"
    colors = {}

    def color(name: str) -> dict[str, str]:
        r, k = name[1:].split("_")
        colors[name] = "red" if (int(r) + int(k)) % 3 == 0 else "blue"
        return {"color": colors[name]}

    sent = _interleave(proc, stomp_client(proc), stomp_client, dest, headers_of=color,
                       sub_headers={"selector": "color = 'red'"})
    proc.restart(kill=True)
    reds = [n for n in sent if colors[n] == "red"]
    blues = [n for n in sent if colors[n] == "blue"]
    r = stomp_client(proc)
    assert _drain(r, dest, len(reds), headers={"selector": "color = 'red'"}) == reds
    proc.restart()
    b = stomp_client(proc)
    assert _drain(b, dest, len(blues), headers={"selector": "color = 'blue'"}) == blues
    # (paging stays on after a selective drain with a read limit: see test_break13_found.py)
    proc.wait_queue(q, messages=0, messages_in_memory=0, messages_paged=0)
    _check_clean(proc)


@pytest.mark.slow  # make test-slow
def test_fifo_selective_and_plain_consumer_together_after_restart(start_broker, stomp_client):
    proc = start_broker(_cfg())
    q = unique("selplain")
    dest = f"/queue/{q}"
    colors = {}

    def color(name: str) -> dict[str, str]:
        _r, k = name[1:].split("_")
        colors[name] = "red" if int(k) % 4 == 3 else "blue"
        return {"color": colors[name]}

    sent = _interleave(proc, stomp_client(proc), stomp_client, dest, headers_of=color)
    proc.restart()
    reds = [n for n in sent if colors[n] == "red"]
    r = stomp_client(proc)
    r.subscribe(dest, ack="client-individual",
                headers={"activemq.prefetchSize": 100, "selector": "color = 'red'"})
    got_red = labels(wait_frames(r, len(reds)))
    assert got_red == reds
    a = stomp_client(proc)
    rest = [n for n in sent if n not in reds]
    assert _drain(a, dest, len(rest)) == rest


# -- durable subscribers on a topic ------------------------------------------------------------


def test_fifo_topic_durable_subscribers_after_kill_and_restart(start_broker, stomp_client):
    proc = start_broker(_cfg(**{"max-read-page-messages": 3}))
    topic = unique("ft")
    subs = {unique("all"): None, unique("red"): "color = 'red'", unique("all2"): None}
    colors = {}

    def color(name: str) -> dict[str, str]:
        k = int(name.split("_")[1])
        colors[name] = "red" if k % 2 else "blue"
        return {"color": colors[name]}

    for cid, sel in subs.items():
        durable(stomp_client, proc, cid, topic, "s", selector=sel).disconnect()
    p = stomp_client(proc)
    sent = []
    for rnd in range(3):
        names = [f"r{rnd}_{k}" for k in range(10)]
        _send(p, f"/topic/{topic}", names, color)
        sent += names
        # one subscriber reads its backlog without acking, then goes away
        cid = list(subs)[rnd % 3]
        h = durable(stomp_client, proc, cid, topic, "s", selector=subs[cid])
        time.sleep(0.4)
        h.drop()
        time.sleep(0.2)
    proc.restart(kill=True)
    proc.restart()
    for cid, sel in subs.items():
        want = [n for n in sent if sel is None or colors[n] == "red"]
        c = stomp_client(proc, client_id=cid)
        c.subscribe(f"/topic/{topic}", ack="client-individual",
                    headers={"durable-subscription-name": "s", "activemq.prefetchSize": 2,
                             **({"selector": sel} if sel else {})})
        assert take(c, len(want), timeout=20) == want, cid
        c.disconnect()
        proc.wait_queue(f"{cid}.s", messages=0, messages_in_memory=0, messages_paged=0)
    wait_address(proc, topic, paging=False, timeout=10)
    _check_clean(proc)


# -- browsers -----------------------------------------------------------------------------------


def _browse(client: StompClient, dest: str, headers=None) -> list[str]:
    client.subscribe(dest, headers={"browser": "true", **(headers or {})})
    listener = client.listener
    listener.wait(lambda: any(m.headers.get("browser") == "end" for m in listener.messages), 10,
                  "browser:end")
    return [labels([m])[0] for m in listener.messages if m.headers.get("browser") != "end"]


@pytest.mark.slow  # make test-slow
def test_fifo_browser_after_restart_sees_send_order(start_broker, stomp_client):
    proc = start_broker(_cfg())
    q = unique("br")
    dest = f"/queue/{q}"
    sent = _interleave(proc, stomp_client(proc), stomp_client, dest)
    proc.restart(kill=True)
    assert _browse(stomp_client(proc), dest) == sent
    sel = [n for n in sent if n.endswith(("_1", "_7"))]
    assert _browse(stomp_client(proc), dest,
                   {"selector": "JMSMessageID IS NOT NULL"}) == sent
    assert _take_some(stomp_client(proc), dest, 6) == sent[:6]
    assert _browse(stomp_client(proc), dest) == sent[6:]
    proc.restart()
    assert _browse(stomp_client(proc), dest) == sent[6:]
    c = stomp_client(proc)
    assert _drain(c, dest, len(sent) - 6) == sent[6:]
    assert sel


# -- expiry ---------------------------------------------------------------------------------------


def test_fifo_with_expiring_messages_across_restart(start_broker, stomp_client):
    proc = start_broker(_cfg())
    q = unique("exp")
    dest = f"/queue/{q}"
    deadline = now_ms() + 4000
    short = set()

    def exp(name: str) -> dict[str, str]:
        k = int(name.split("_")[1])
        if k % 3 == 1:
            short.add(name)
            return {"expires": str(deadline)}
        return {}

    sent = _interleave(proc, stomp_client(proc), stomp_client, dest, headers_of=exp)
    proc.restart(kill=True)
    remaining = max(0.0, (deadline - now_ms()) / 1000) + 1.0
    time.sleep(remaining)
    want = [n for n in sent if n not in short]
    c = stomp_client(proc)
    assert _drain(c, dest, len(want)) == want
    _assert_empty(proc, q)
    _check_clean(proc)


# -- counts ---------------------------------------------------------------------------------------


@pytest.mark.slow  # make test-slow
def test_fifo_counts_during_partial_drain_after_restart(start_broker, stomp_client):
    proc = start_broker(_cfg())
    q = unique("cnt")
    dest = f"/queue/{q}"
    sent = _interleave(proc, stomp_client(proc), stomp_client, dest)
    proc.restart()
    total, mem, paged = _counts(proc, q)
    assert (total, mem + paged) == (len(sent), len(sent))
    assert _take_some(stomp_client(proc), dest, 10) == sent[:10]
    proc.wait_queue(q, messages=len(sent) - 10)
    total, mem, paged = _counts(proc, q)
    assert mem + paged == total, (total, mem, paged)
    proc.restart(kill=True)
    total, mem, paged = _counts(proc, q)
    assert (total, mem + paged) == (len(sent) - 10, len(sent) - 10)
    c = stomp_client(proc)
    assert _drain(c, dest, len(sent) - 10) == sent[10:]
    _assert_empty(proc, q)
