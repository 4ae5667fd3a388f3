"""One broker per data directory (issue 13, defect 12): a second `pagemq serve` on a data
directory in use refuses to start, with one line naming the running broker's pid, before it
touches any file; the lock goes with the process, kill -9 included."""

from __future__ import annotations

from pathlib import Path

from brokerproc import HOST, broker_still_serves, free_port, run_cli, unique


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _second_serve(data_dir: Path, cwd: Path):
    return run_cli("serve", "--data-dir", str(data_dir), "--stomp", f"{HOST}:{free_port()}",
                   "--http", f"{HOST}:{free_port()}", cwd=cwd, timeout=20)


def _serve_sharing(tmp_path: Path, key: str, shared: Path):
    """`pagemq serve` with a data directory of its own and `key` (journal-directory or
    paging-directory) set to `shared`."""
    config = tmp_path / f"{key}.toml"
    config.write_text(f'[broker]\n{key} = "{shared}"\n')
    return run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path / f"own-{key}"),
                   "--stomp", f"{HOST}:{free_port()}", "--http", f"{HOST}:{free_port()}",
                   cwd=tmp_path, timeout=20)


def test_a_second_broker_on_the_same_data_directory_refuses_to_start_naming_the_pid(
    start_broker, stomp_client, tmp_path
):
    first = start_broker()
    queue = unique("locked")
    producer = stomp_client(first)
    for n in range(5):
        producer.send(f"/queue/{queue}", f"m{n}", headers={"persistent": "true"}, receipt=True)
    before = _files(first.data_dir)

    second = _second_serve(first.data_dir, tmp_path)

    assert second.returncode == 1, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, second.stderr
    assert "Traceback" not in second.stderr
    assert f"pid {first.proc.pid}" in lines[0] and str(first.data_dir) in lines[0], lines[0]
    assert _files(first.data_dir) == before  # nothing touched: no new journal file, no cleanup
    assert first.queue(queue)["messages"] == 5
    broker_still_serves(first.stomp_port)


def test_the_lock_goes_with_a_killed_broker(start_broker, stomp_client, tmp_path):
    first = start_broker()
    queue = unique("relock")
    stomp_client(first).send(f"/queue/{queue}", "kept", headers={"persistent": "true"}, receipt=True)
    first.kill()
    first.start()  # same data directory: the kernel dropped the dead process's lock
    assert first.queue(queue)["messages"] == 1
    assert (first.data_dir / "server.lock").read_text().strip() == str(first.proc.pid)


def test_a_second_broker_sharing_only_the_journal_or_paging_directory_refuses_to_start(
    start_broker, stomp_client, tmp_path
):
    """(Before: the lock covered the data directory only, so two brokers with their own
    data directories both wrote one shared journal, and lost RECEIPTed messages.)"""
    journal, paging = tmp_path / "shared-journal", tmp_path / "shared-paging"
    first = start_broker({"broker": {"journal-directory": str(journal), "paging-directory": str(paging)}})
    queue = unique("sharedjournal")
    stomp_client(first).send(f"/queue/{queue}", "kept", headers={"persistent": "true"}, receipt=True)
    before = _files(journal)
    for key, shared in (("journal-directory", journal), ("paging-directory", paging)):
        second = _serve_sharing(tmp_path, key, shared)
        assert second.returncode == 1, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
        kind = key.replace("-", " ")
        assert f"{kind} {shared} is in use by another broker (pid {first.proc.pid}" in lines[0], lines[0]
    assert _files(journal) == before
    assert first.queue(queue)["messages"] == 1
    broker_still_serves(first.stomp_port)


def test_a_second_broker_naming_the_journal_inside_the_first_ones_data_directory_refuses_to_start(
    start_broker, stomp_client, tmp_path
):
    """(Before: only the data directory's lock was taken for a journal inside it, so a second
    broker naming that journal as its own started and shared it.)"""
    first = start_broker()
    for key in ("journal-directory", "paging-directory"):
        shared = first.data_dir / key.split("-")[0]
        second = _serve_sharing(tmp_path, key, shared)
        assert second.returncode == 1, second.stderr
        assert f"{key.replace('-', ' ')} {shared} is in use by another broker" in second.stderr
    broker_still_serves(first.stomp_port)
