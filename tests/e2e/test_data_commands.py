"""`pagemq data print` and `pagemq data check` on a real broker's data directory, and
`python -m pagemq` as the same program.

print names every address and queue with its messages (in the journal and paged), as
Artemis' `data print` does; check reads every file and exits 0 when sound, 1 with file and
offset per problem; neither changes a byte, and check refuses while a broker runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from brokerproc import run_cli, unique
from test_paging_helpers import ack_frames, numbered, send_all, wait_frames

PAGE_ONE = "paged"


def _config(paged_address: str) -> dict:
    return {"address-settings": {paged_address: {"page-size-bytes": "16KiB", "max-size-bytes": 0}}}


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _queue_line(output: str, queue: str) -> str:
    lines = [line for line in output.splitlines() if f"queue {queue!r}" in line]
    assert len(lines) == 1, output
    return lines[0]


def _counts(line: str) -> tuple[int, int, int]:
    match = re.search(r": (\d+) messages \((\d+) in the journal, (\d+) paged\)", line)
    assert match, line
    return int(match[1]), int(match[2]), int(match[3])


def _fill(proc, stomp_client) -> tuple[str, str, str]:
    """A queue in memory (journal), a paging queue, a topic with two durable subscribers."""
    memory, paged, topic = unique("mem"), proc.paged_name, unique("topic")
    for client_id in ("c1", "c2"):
        sub = stomp_client(proc, client_id=f"{client_id}-{topic}")
        sub.subscribe(f"/topic/{topic}", headers={"durable-subscription-name": "s"})
        sub.disconnect()
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{memory}", numbered("j", 7), size=100)
    send_all(producer, f"/queue/{paged}", numbered("p", 30))
    send_all(producer, f"/topic/{topic}", numbered("t", 4), size=100)
    consumer = stomp_client(proc)
    consumer.subscribe(f"/queue/{memory}", ack="client-individual")
    ack_frames(consumer, wait_frames(consumer, 7)[:2])  # 5 left
    consumer.disconnect()
    return memory, paged, topic


def test_data_print_names_every_address_and_queue_with_its_messages(start_broker, stomp_client):
    paged = unique(PAGE_ONE)
    proc = start_broker(_config(paged))
    proc.paged_name = paged
    memory, paged, topic = _fill(proc, stomp_client)
    expected = {name: proc.queue(name)["messages"]
                for name in (memory, paged, f"c1-{topic}.s", f"c2-{topic}.s")}
    assert expected == {memory: 5, paged: 30, f"c1-{topic}.s": 4, f"c2-{topic}.s": 4}
    proc.kill()
    before = _snapshot(proc.data_dir)

    result = run_cli("data", "print", "--data-dir", str(proc.data_dir))
    assert result.returncode == 0, result.stderr
    assert _counts(_queue_line(result.stdout, memory)) == (5, 5, 0)
    assert _counts(_queue_line(result.stdout, paged)) == (30, 0, 30)
    for client_id in ("c1", "c2"):
        assert _counts(_queue_line(result.stdout, f"{client_id}-{topic}.s"))[0] == 4
    assert f"address {topic!r} (multicast)" in result.stdout
    assert "pagemq-" in result.stdout  # journal files are still listed

    narrowed = run_cli("data", "print", "--data-dir", str(proc.data_dir), "--address", paged)
    assert narrowed.returncode == 0, narrowed.stderr
    assert f"queue {paged!r}" in narrowed.stdout and f"queue {memory!r}" not in narrowed.stdout
    detailed = run_cli("data", "print", "--data-dir", str(proc.data_dir), "--records")
    assert "ADD seq=" in detailed.stdout
    assert _snapshot(proc.data_dir) == before  # print changed nothing

    proc.start()  # and the broker agrees after recovery
    for name, count in expected.items():
        assert proc.queue(name)["messages"] == count


def test_data_check_is_clean_after_a_crash_and_changes_nothing(start_broker, stomp_client):
    paged = unique(PAGE_ONE)
    proc = start_broker(_config(paged))
    proc.paged_name = paged
    _fill(proc, stomp_client)
    proc.kill()
    before = _snapshot(proc.data_dir)
    result = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sound" in result.stdout.splitlines()[-1]
    assert not [line for line in result.stdout.splitlines() if line.startswith("problem")]
    assert _snapshot(proc.data_dir) == before


def test_data_check_refuses_while_a_broker_runs_and_print_warns(start_broker):
    proc = start_broker()
    check = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    assert check.returncode == 2
    assert f"pid {proc.proc.pid}" in check.stderr and "stop the broker" in check.stderr
    shown = run_cli("data", "print", "--data-dir", str(proc.data_dir))
    assert shown.returncode == 0 and "may be changing" in shown.stderr


def test_data_commands_given_the_journal_or_paging_directory_say_so_rather_than_sound(
        start_broker, stomp_client):
    """(Before: `data check --data-dir DATA/journal` found "no journal directory" and said sound.)"""
    paged = unique(PAGE_ONE)
    proc = start_broker(_config(paged))
    send_all(stomp_client(proc), f"/queue/{paged}", numbered("p", 5))
    proc.stop()
    for sub, kind in (("journal", "journal directory"), ("paging", "paging directory")):
        for command in ("check", "print"):
            result = run_cli("data", command, "--data-dir", str(proc.data_dir / sub))
            assert result.returncode == 2, result.stdout + result.stderr
            assert "is not a data directory: it holds" in result.stderr and kind in result.stderr


def test_data_check_reports_file_and_offset_of_a_broken_page(start_broker, stomp_client):
    paged = unique(PAGE_ONE)
    proc = start_broker(_config(paged))
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{paged}", numbered("p", 5))
    proc.stop()
    (page,) = sorted((proc.data_dir / "paging").rglob("*.page"))
    data = bytearray(page.read_bytes())
    data[200] ^= 0x01
    page.write_bytes(bytes(data))
    result = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem")]
    assert problems and page.name in problems[0] and "at offset " in problems[0], result.stdout


def test_data_check_reports_a_page_file_removed_with_unacknowledged_messages(start_broker, stomp_client):
    """(Before: "sound", exit 0, and the next start dropped the page's messages with an INFO
    line.) A page deleted after its messages were consumed leaves nothing to report. Helper 41."""
    paged = unique(PAGE_ONE)
    proc = start_broker(_config(paged))
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{paged}", numbered("p", 40))  # 1 KiB each: three pages or more
    proc.stop()
    pages = sorted((proc.data_dir / "paging").rglob("*.page"))
    assert len(pages) >= 3
    pages[1].unlink()
    result = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    assert result.returncode == 1, result.stdout
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem")]
    assert len(problems) == 1, result.stdout
    assert "is gone" in problems[0] and "not acknowledged" in problems[0], result.stdout
    proc.start()
    assert any("its page is gone: it held" in line and "WARNING" in line for line in proc.log_lines), \
        proc.log_tail()


def test_python_dash_m_pagemq_is_the_same_program(tmp_path):
    module = subprocess.run([sys.executable, "-m", "pagemq", "data", "check", "--data-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=30, check=False)
    script = run_cli("data", "check", "--data-dir", str(tmp_path))
    assert (module.returncode, module.stdout) == (script.returncode, script.stdout) == (0, script.stdout)
    usage = subprocess.run([sys.executable, "-m", "pagemq", "--help"], capture_output=True, text=True,
                           timeout=30, check=False)
    assert usage.returncode == 0 and "serve" in usage.stdout and "data" in usage.stdout


def test_data_check_calls_the_page_folder_a_deleted_address_leaves_sound(start_broker, stomp_client):
    """Deleting an address that paged keeps its (emptied) page folder, as docs/http-api.md
    says: a note, not a problem."""
    from admin_http import call

    paged = unique("gone")
    proc = start_broker(_config(paged))
    producer = stomp_client(proc)
    for n in range(20):
        producer.send(f"/queue/{paged}", f"m{n}" + "x" * 2000, headers={"persistent": "true"}, receipt=True)
    assert proc.address(paged)["paging"]
    assert call(proc, "DELETE", f"/api/addresses/{paged}")[0] == 200
    proc.stop()
    result = run_cli("data", "check", "--data-dir", str(proc.data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("note") and paged in line for line in lines), result.stdout
