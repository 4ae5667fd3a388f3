"""Start-up: the broker's addresses, queues and messages rebuilt from the journal and the
page files, and cursor records found stale on the way.

1. The journal's records give the addresses, the queues (with their ids and filters) and
   the messages held in memory, each with the queues that still hold it.
2. Ids continue above every recovered one (paged messages' too): a queue's order across
   a restart is the order of its ids.
   Damage read past in the journal may have taken a queue's record: its messages make it
   again (`_remake_lost_queues`) rather than being dropped as a deleted queue's.
3. Each page folder of a known address is read from its page summaries and the cursor
   records (no page body, but for the rare batch of a transaction that never committed).
4. Cursor and page-transaction records whose page or queue is gone, and duplicate-id
   records past their address's (lowered) `id-cache-size`, are collected as stale, deleted
   once the journal runs (`forget_stale`).

Loop-only: runs on the event loop thread, before any listener accepts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pagemq.core.address import ANYCAST
from pagemq.core.consumer import MessageRef
from pagemq.core.message_codec import stored_message
from pagemq.storage.api import QueueRecord

if TYPE_CHECKING:
    from pagemq.core.address import Address
    from pagemq.core.bindings import Bindings
    from pagemq.core.duplicates import DuplicateIds
    from pagemq.core.ids import Ids
    from pagemq.core.ledger import Ledger
    from pagemq.core.queue import Queue
    from pagemq.storage.api import CursorAck, CursorComplete, MessageStore, PageTxCommit, Recovered

log = logging.getLogger("pagemq.broker")


class Recovery:
    def __init__(
        self, bindings: Bindings, ledger: Ledger, store: MessageStore, ids: Ids, duplicates: DuplicateIds,
    ) -> None:
        self.bindings = bindings
        self.duplicates = duplicates
        self.ledger = ledger
        self.store = store
        self.ids = ids
        self.paging_directory = Path("data/paging")
        # Cursor records found at start-up whose page no longer exists; see forget_stale().
        self.stale_records: list[int] = []
        # Queues made again for messages whose queue's record damage took (written then).
        self.remade_queues: list[QueueRecord] = []

    def recover(self) -> int:
        """Rebuild durable addresses, queues and their messages from the store; how many
        messages there are."""
        bindings = self.bindings
        recovered = self.store.load()
        self.ids.above(recovered.max_id)
        for record in recovered.addresses:
            bindings.create_address(record.name, record.routing_type, record.address_id)
        for queue_record in recovered.queues:
            address = bindings.addresses.get(queue_record.address)
            if address is None:
                address = bindings.create_address(queue_record.address, queue_record.routing_type, 0)
            bindings.create_queue(
                address, queue_record.name, queue_record.routing_type,
                queue_id=queue_record.queue_id, filter_text=queue_record.filter,
                durable=True, temporary=False,
            )
        if recovered.damaged:
            self._remake_lost_queues(recovered)
        # Ids past a lowered id-cache-size: their records are deleted once the journal runs.
        self.stale_records.extend(self.duplicates.recover(recovered.duplicate_ids))
        count = 0
        hold = self.ledger.hold
        # The queues (and their address) of each set of queue ids met: messages come by the
        # ten thousand and almost all of them go to the same few sets.
        targets: dict[tuple[int, ...], tuple[list[Queue], Address | None]] = {}
        for item in recovered.messages:
            key = tuple(item.queue_ids)
            target = targets.get(key)
            if target is None:
                target = targets[key] = self._target(key)
            queues, address = target
            # Rebuilt (and so checked) even when its queues are gone: a message the broker
            # could not read stops the start, it is not dropped by the next cleanup.
            message = stored_message(item.payload, item.at, item.address)
            if address is None:
                continue  # every queue of it is gone
            hold(message, address, len(queues), durable=len(queues))
            counts = item.delivery_counts
            for queue in queues:
                ref = MessageRef(message)
                if counts is not None:  # given back unacknowledged before the restart
                    ref.delivery_count = counts.get(queue.queue_id, 0)
                queue.add_recovered(ref)
            count += 1
        if bindings.page_stores is not None:
            count += self._recover_paging(recovered, self.paging_directory)
        return count

    def _remake_lost_queues(self, recovered: Recovered) -> None:
        """Damage read past in the journal may have taken a queue's record and left its
        messages, which name it by id: the queue is made again rather than its messages
        dropped as a deleted queue's are (its paged ones: `_recover_paging`). Its name,
        unknown, is its address's (an anycast address without that queue) or
        `<address>.recovered-<id>`; routing is the address's. Its record is written once
        the journal runs. (A queue deleted before the damage whose records were still
        about may come back too: a false alarm costs a queue to delete, a miss messages.)"""
        bindings = self.bindings
        lost: dict[int, tuple[str, int]] = {}  # queue id -> (address, messages)
        for item in recovered.messages:
            for queue_id in item.queue_ids:
                if queue_id not in bindings.queues_by_id:
                    _address, count = lost.get(queue_id, (item.address, 0))
                    lost[queue_id] = (item.address, count + 1)
        for queue_id, (address_name, count) in sorted(lost.items()):
            self._remake(queue_id, address_name, f"its {count} message(s) in the journal")

    def _remake(self, queue_id: int, address_name: str, what: str) -> None:
        """A queue whose record is lost, made again with its id (see `_remake_lost_queues`).
        Of a multicast address it takes no new message (filter FALSE): its name, and so
        whose subscription it was, is unknown, and a copy of everything sent from now on
        would pile up in it."""
        bindings = self.bindings
        address = bindings.addresses.get(address_name)
        if address is None:
            address = bindings.create_address(address_name, ANYCAST, 0)
        name, selector = address_name, None
        if address.routing_type != ANYCAST or name in bindings.queues:
            name = f"{address_name}.recovered-{queue_id}"
        if address.routing_type != ANYCAST:
            selector = "FALSE"
        bindings.create_queue(address, name, address.routing_type, queue_id=queue_id,
                              filter_text=selector, durable=True, temporary=False)
        self.remade_queues.append(QueueRecord(queue_id, name, address_name, address.routing_type, selector))
        log.error("journal damage took the record of queue id %d of address %r: %s are kept in "
                  "queue %r, made again (%s%s); consume or move them, and check its name and "
                  "consumers", queue_id, address_name, what, name, address.routing_type,
                  ", filter FALSE: it takes no new message" if selector else "")

    def _target(self, queue_ids: tuple[int, ...]) -> tuple[list[Queue], Address | None]:
        """The queues of these ids that still exist, and their address (a message goes to
        queues of one address); None for the address when none of them exists."""
        by_id = self.bindings.queues_by_id
        queues = [by_id[qid] for qid in queue_ids if qid in by_id]
        return queues, self.bindings.address_of(queues[0]) if queues else None

    def _recover_paging(self, recovered: Recovered, directory: Path) -> int:
        from pagemq.storage.paging.page_store import PageStore

        bindings = self.bindings
        paged = 0
        read: set[str] = set()
        # Each pager is handed its own queues' records only: with thousands of paging
        # addresses, every pager going through every record was addresses x records.
        acks_of: dict[int, list[CursorAck]] = {}
        for ack in recovered.cursor_acks:
            acks_of.setdefault(ack.queue_id, []).append(ack)
        completes_of: dict[int, list[CursorComplete]] = {}
        for complete in recovered.cursor_completes:
            completes_of.setdefault(complete.queue_id, []).append(complete)
        commits_of: dict[str, list[PageTxCommit]] = {}
        for commit in recovered.page_tx_commits:
            commits_of.setdefault(commit.address, []).append(commit)
        for name, folder in sorted(PageStore.discover(directory).items()):
            address = bindings.addresses.get(name)
            if address is None:
                # An address an operator deleted leaves its folder without pages: not alarming.
                pages = any(folder.glob("*.page"))
                log.log(logging.WARNING if pages else logging.INFO,
                        "page folder for unknown address %r: kept, not read%s", name,
                        "" if pages else " (it holds no page: the address was deleted)")
                continue
            pager = bindings.pager(address)
            if recovered.damaged:  # records of a queue whose record the damage took
                for queue_id in sorted(pager.store.queue_ids_on_disk() - bindings.queues_by_id.keys()):
                    self._remake(queue_id, name, "its paged messages")
            # Ids stay above every paged message too (the journal may no longer hold the
            # newest): the order of a queue across a restart is the order of its ids.
            self.ids.above(pager.store.last_message_id())
            queue_ids = [queue.queue_id for queue in address.queues.values()]
            self.stale_records.extend(pager.recover(
                [ack for qid in queue_ids for ack in acks_of.get(qid, ())],
                [complete for qid in queue_ids for complete in completes_of.get(qid, ())],
                commits_of.get(name, [])))
            paged += pager.messages_paged
            read.add(name)
        # Commit records of page transactions whose address pages no more: nothing to commit.
        self.stale_records.extend(
            record.record_id for record in recovered.page_tx_commits if record.address not in read
        )
        # Cursor records of queues that no longer exist belong to no pager: forget them.
        cursor_records: list[CursorAck | CursorComplete] = [
            *recovered.cursor_acks, *recovered.cursor_completes
        ]
        self.stale_records.extend(
            record.record_id for record in cursor_records if record.queue_id not in bindings.queues_by_id
        )
        return paged

    def forget_record(self, record_id: int) -> None:
        """Delete a stale record; after shutdown began, the next start-up finds it stale."""
        try:
            self.store.delete_record(record_id)
        except (OSError, LookupError) as exc:
            log.debug("record %d kept for the next start-up: %s", record_id, exc)

    def forget_stale(self) -> int:
        """Delete the stale records found by recovery (the journal must be running)."""
        stale, self.stale_records = self.stale_records, []
        for record_id in stale:
            self.forget_record(record_id)
        remade, self.remade_queues = self.remade_queues, []
        for record in remade:
            self.store.add_queue(record)
        self.duplicates.write_recovered()
        return len(stale)
