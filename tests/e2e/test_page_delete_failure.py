"""A page whose file cannot be deleted keeps its acknowledgements (issue 13, defect 9).

Every message of a page is acknowledged (with receipts), the broker deletes the page file,
and the delete fails (here: the file is made immutable with `chattr +i`, which even root
cannot remove). The broker must then keep the page's cursor records: after a restart
(the file deletable again) the acknowledged messages stay acknowledged. Before the fix the
records were deleted anyway, and the page came back with all its messages.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from brokerproc import unique, wait_until
from test_paging_helpers import consume, numbered, page_files, send_all

PAGE_ALL = {"address-settings": {"#": {"page-size-bytes": "16KiB", "max-size-bytes": 0}}}


def _chattr(flag: str, path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0


def test_acknowledged_messages_of_a_page_that_could_not_be_deleted_stay_acknowledged(
    start_broker, stomp_client
):
    proc = start_broker(PAGE_ALL)
    queue = unique("undeletable")
    producer = stomp_client(proc)
    send_all(producer, f"/queue/{queue}", numbered("m", 40))
    first = page_files(proc, queue)[0]
    if not _chattr("+i", first):
        pytest.skip("chattr +i is not available here")
    try:
        consumer = stomp_client(proc)
        assert consume(consumer, f"/queue/{queue}", 40) == numbered("m", 40)
        wait_until(lambda: any("delete of" in line and first.name in line and "failed" in line
                               for line in proc.current_log), timeout=10, what="the failed delete")
        assert first.exists()
        consumer.disconnect()
        producer.disconnect()
        proc.stop()
    finally:
        _chattr("-i", first)
    proc.start()
    assert proc.queue(queue)["messages"] == 0, proc.log_tail()
    again = stomp_client(proc)
    assert consume(again, f"/queue/{queue}", 0, settle=0.5) == []
    wait_until(lambda: not first.exists(), timeout=10, what="the page to be deleted after the restart")
