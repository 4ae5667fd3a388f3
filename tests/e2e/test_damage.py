"""Damage on disk costs the damaged record, never the good data after it (issue 13, defect 5).

A byte flipped inside one stored message, as bit rot or a bad sector does: the broker
starts, says which file and offset, delivers every other message, keeps acknowledged
messages acknowledged, and never deletes or cuts the damaged file (it is set aside as
`*.damaged` once nothing in it is needed). `pagemq data check` names the same file and
offset (exit 1) without changing a byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from brokerproc import run_cli, unique
from test_paging_helpers import (
    ack_frames,
    consume,
    labels,
    numbered,
    page_files,
    page_folder,
    send_all,
    wait_address,
    wait_frames,
)

from pagemq.storage.paging.page_format import FILE_HEADER, FRAME_HEADER

PAGE_ALL = {"address-settings": {"#": {"page-size-bytes": "64KiB", "max-size-bytes": 0}}}


def _flip_inside(path: Path, marker: bytes) -> int:
    """Flip one byte a little after `marker` (inside that message's body); its offset."""
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at >= 0, f"{marker!r} not found in {path}"
    at += len(marker) + 10
    data[at] ^= 0x20
    path.write_bytes(bytes(data))
    return at


def _frame_holding(page: Path, offset: int) -> int:
    """Where the frame holding byte `offset` of a page starts (frames are contiguous)."""
    data = page.read_bytes()
    at = FILE_HEADER.size
    while at < len(data):
        end = at + FRAME_HEADER.size + FRAME_HEADER.unpack_from(data, at)[2]
        if at <= offset < end:
            return at
        at = end
    raise AssertionError(f"offset {offset} is past the frames of {page}")


def _journal_files(proc) -> list[Path]:
    return sorted((proc.data_dir / "journal").glob("pagemq-*.jnl*"))


def _file_holding(paths: list[Path], marker: bytes) -> Path:
    return next(p for p in paths if marker in p.read_bytes())


def _check(proc) -> tuple[int, str]:
    result = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    return result.returncode, result.stdout + result.stderr


def test_a_damaged_journal_record_costs_that_record_and_acked_messages_stay_gone(start_broker, stomp_client):
    proc = start_broker()
    queue = unique("jdamage")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{queue}", numbered("m", 20), size=200)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    frames = wait_frames(consumer, 20)
    assert labels(frames) == numbered("m", 20)
    ack_frames(consumer, frames[:10])  # acknowledged, the last with a receipt
    consumer.disconnect()
    producer.disconnect()
    proc.stop()

    victim = _file_holding(_journal_files(proc), b"m2|")
    _flip_inside(victim, b"m2|")
    before = {p.name: p.read_bytes() for p in _journal_files(proc)}
    code, report = _check(proc)
    assert code == 1 and victim.name in report and "offset" in report, report
    assert {p.name: p.read_bytes() for p in _journal_files(proc)} == before  # check changed nothing

    proc.start()
    assert any(victim.name in line and "damaged bytes at offset" in line for line in proc.current_log), (
        proc.log_tail())
    # Before, the rest of the file was skipped: m3..m19 lost and m0, m1 (acknowledged) back.
    again = stomp_client(proc)
    assert consume(again, f"/queue/{queue}", 10) == numbered("m", 10, start=10)
    again.disconnect()
    proc.restart()
    assert proc.queue(queue)["messages"] == 0
    names = {p.name for p in _journal_files(proc)}
    assert victim.name in names or victim.name + ".damaged" in names  # kept, or set aside: never deleted


@pytest.mark.parametrize("paged", [False, True], ids=["journal", "paged"])
def test_a_damaged_queue_record_leaves_its_messages_in_the_queue_made_again(
        start_broker, stomp_client, paged):
    """(Before: the messages naming the lost record's queue were dropped as a deleted
    queue's, 'recovered 0 messages', and a SUBSCRIBE made a new, empty queue; paged, their
    page file was deleted too.)"""
    proc = start_broker(PAGE_ALL if paged else None)
    queue = unique("qdamage")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{queue}", numbered("m", 5), size=200)
    # a record after the queue's (paged messages are not in the journal): damage in the
    # last one is taken for a crash's torn tail and cut
    send_all(producer, f"/queue/{unique('after')}", numbered("a", 1))
    producer.disconnect()
    proc.stop()

    record = f'"address": "{queue}"'.encode()  # the queue's record (JSON), not the address's
    victim = _file_holding(_journal_files(proc), record)
    data = bytearray(victim.read_bytes())
    data[data.find(record) + 3] ^= 0x20
    victim.write_bytes(bytes(data))
    assert _check(proc)[0] == 1

    proc.start()
    kept = "its paged messages" if paged else "its 5 message(s) in the journal"
    assert any(f"of address {queue!r}: {kept} are kept in queue {queue!r}" in line
               for line in proc.current_log), proc.log_tail()
    assert proc.queue(queue)["messages"] == 5
    proc.restart()  # the queue's record was written again: no longer made again
    assert not any("are kept in queue" in line for line in proc.current_log), proc.log_tail()
    again = stomp_client(proc)
    assert consume(again, f"/queue/{queue}", 5) == numbered("m", 5)


def _page_scenario(start_broker, stomp_client, *, kill: bool):
    proc = start_broker(PAGE_ALL)
    queue = unique("pdamage")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{queue}", numbered("m", 10))
    producer.disconnect()
    if kill:
        proc.kill()  # the page is still live: no summary, the start scans it
    else:
        proc.stop()  # the page is closed with a summary: the damage is met while reading
    (page,) = page_files(proc, queue)
    size = page.stat().st_size
    frame = _frame_holding(page, _flip_inside(page, b"m4|"))
    code, report = _check(proc)
    assert code == 1 and page.name in report, report
    proc.start()
    assert page.stat().st_size == size, "the page was cut"
    consumer = stomp_client(proc)
    got = consume(consumer, f"/queue/{queue}", 9)
    assert got == [f"m{n}" for n in range(10) if n != 4]
    warnings = [line for line in proc.current_log if page.name in line and "damaged bytes" in line]
    assert any(f"offset {frame}" in line for line in warnings), proc.log_tail()
    consumer.disconnect()
    return proc, queue, page


def test_a_damaged_frame_in_a_summarised_page_costs_that_message_only(start_broker, stomp_client):
    proc, queue, page = _page_scenario(start_broker, stomp_client, kill=False)
    proc.restart()  # the page was re-counted when the damage was found: the queue can finish it
    assert proc.queue(queue)["messages"] == 0
    folder = page_folder(proc, queue)
    assert folder is not None and (folder / (page.name + ".damaged")).exists()
    assert not page_files(proc, queue)


def test_a_damaged_frame_in_the_page_live_at_a_crash_is_not_cut_away(start_broker, stomp_client):
    proc, queue, page = _page_scenario(start_broker, stomp_client, kill=True)
    proc.restart()
    assert proc.queue(queue)["messages"] == 0
    folder = page_folder(proc, queue)
    assert folder is not None and (folder / (page.name + ".damaged")).exists()


def test_a_closed_page_that_lost_its_end_is_damage_not_a_torn_tail_and_is_not_cut(start_broker, stomp_client):
    """A closed page is fsynced before its summary is written, so a file shorter than its
    summary says lost bytes to damage: a crash cannot leave that. (Before: `data check` said
    sound and the start cut the file as a torn tail.)"""
    proc = start_broker(PAGE_ALL)
    queue = unique("pshort")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{queue}", numbered("m", 10))
    producer.disconnect()
    proc.stop()  # the page is closed with its summary
    (page,) = page_files(proc, queue)
    cut = page.stat().st_size - 100
    with page.open("r+b") as file:
        file.truncate(cut)
    code, report = _check(proc)
    assert code == 1 and "100 bytes shorter than its summary" in report, report
    proc.start()
    assert page.stat().st_size == cut, "the page was cut further"
    assert any(page.name in line and "its end was lost to damage" in line for line in proc.current_log), (
        proc.log_tail())
    consumer = stomp_client(proc)
    assert consume(consumer, f"/queue/{queue}", 9) == numbered("m", 9)
    consumer.disconnect()
    proc.restart()
    assert proc.queue(queue)["messages"] == 0
    folder = page_folder(proc, queue)
    assert folder is not None and (folder / (page.name + ".damaged")).exists()  # set aside, kept


def test_a_closed_page_cut_inside_its_file_header_is_a_problem_for_data_check(start_broker, stomp_client):
    """(Before: a page shorter than its header was noted as a crash's torn header, exit 0.)"""
    proc = start_broker(PAGE_ALL)
    queue = unique("pheader")
    send_all(stomp_client(proc), f"/queue/{queue}", numbered("m", 10))
    proc.stop()
    (page,) = page_files(proc, queue)
    with page.open("r+b") as file:
        file.truncate(10)
    code, report = _check(proc)
    assert code == 1 and "its records were lost to damage" in report, report


def test_a_page_damaged_between_restart_and_read_stops_counting_its_lost_message_at_once(
    start_broker, stomp_client
):
    """Damage met while reading a summarised page: the message it took leaves the counts as
    soon as it is found, not at the next restart (before, the queue kept counting it, so it
    never reached 0 and the page was never done with until a restart re-counted it)."""
    proc, queue, page = _page_scenario(start_broker, stomp_client, kill=False)
    proc.wait_api(f"/api/queues/{queue}", f"queue {queue}", 5.0,
                  {"messages": 0, "messages_paged": 0, "messages_in_memory": 0})
    wait_address(proc, queue, 5.0, paging=False, messages=0, page_files=0)
    folder = page_folder(proc, queue)
    assert folder is not None and (folder / (page.name + ".damaged")).exists()  # set aside, not deleted
    counted = [line for line in proc.current_log if "no longer counted" in line]
    assert len(counted) == 1 and page.name in counted[0] and f"'{queue}' 1" in counted[0], proc.log_tail()


def test_a_page_damaged_while_the_broker_runs_costs_its_message_and_no_count(start_broker, stomp_client):
    """A byte of a closed page flips under a running broker, in a message of a topic with
    two durable subscriptions (one paged copy for both). Each subscriber gets every other
    message in order; the damage is logged once (file and offset) though both queues read
    past it; both queues count down to 0, the address leaves page mode, and the page is set
    aside once both are done with it."""
    proc = start_broker({"address-settings": {"#": {
        "page-size-bytes": "16KiB", "max-size-bytes": -1, "max-size-messages": 5}}})
    topic = unique("tdamage")
    for client_id in ("c1", "c2"):
        sub = stomp_client(proc, client_id=client_id)
        sub.subscribe(f"/topic/{topic}", headers={"durable-subscription-name": "s"})
        sub.disconnect()
    producer = stomp_client(proc)
    sent = numbered("m", 40)
    send_all(producer, f"/topic/{topic}", sent)
    pages = page_files(proc, topic)
    assert len(pages) >= 3, pages
    victim = _file_holding(pages, b"m20|")
    assert victim != pages[-1], "m20 should be in a closed page, not the live one"
    frame = _frame_holding(victim, _flip_inside(victim, b"m20|"))
    assert proc.queue("c1.s")["messages"] == 40  # not read yet: nobody knows of the damage

    expected = [name for name in sent if name != "m20"]
    for client_id in ("c1", "c2"):
        consumer = stomp_client(proc, client_id=client_id)
        got = consume(consumer, f"/topic/{topic}", len(expected),
                      headers={"durable-subscription-name": "s"})
        assert got == expected
        proc.wait_api(f"/api/queues/{client_id}.s", f"queue {client_id}.s", 5.0,
                      {"messages": 0, "messages_paged": 0})
        consumer.disconnect()
    wait_address(proc, topic, 5.0, paging=False, messages=0, page_files=0)
    assert (victim.parent / (victim.name + ".damaged")).exists() and not victim.exists()
    damaged = [line for line in proc.current_log if "damaged bytes at offset" in line]
    assert len(damaged) == 1 and victim.name in damaged[0] and f"offset {frame}" in damaged[0], (
        proc.log_tail())
    counted = [line for line in proc.current_log if "no longer counted" in line]
    assert len(counted) == 1 and "'c1.s' 1" in counted[0] and "'c2.s' 1" in counted[0], proc.log_tail()

    producer.send(f"/topic/{topic}", "after", headers={"persistent": "true"}, receipt=True)
    assert proc.address(topic)["paging"] is False  # back in memory: the backlog is gone
