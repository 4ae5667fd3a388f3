"""The page writers' threads: a small pool shared by every address, not a thread per address.

A broker with thousands of paging addresses (a queue per tenant) had a writer thread per
address: 7,000 threads, ~1.5 ms each to start on the loop at start-up, and as many stacks.
Artemis runs its page stores' writes on a shared executor pool; so does this: each
`PageWriter` keeps its own batch, handles and order, and when it has a batch to write it is
*scheduled* here, at the time that batch is due (`page-sync-timeout` after its previous
batch started, or at once when urgent). A pool thread takes the writer whose batch is due
first and runs one batch of it (`PageWriter.run_batch`: write, fsync, closes, deletes,
futures resolved on the loop), then the writer is scheduled again if more came meanwhile,
and that same thread runs it when it is due: one address writing steadily keeps to one
thread, as with a thread of its own (a second one woken per batch only took the GIL).

- One writer is run by one pool thread at a time (its `_busy` flag), so its batches keep
  their order and its file handles have one user, as with a thread of its own.
- Writers are independent: `threads` batches (of different addresses) are written and
  fsynced at once, so a slow fsync of one address delays at most one thread's turn.
- A RECEIPT still waits for the fsync of its own page file: the pool changes who writes a
  batch, not what a batch's future promises.

Threads are started when first needed (a broker with no paging address has none) and end
at `shutdown`, after every writer has stopped. Locks: a writer's lock may be held while the
pool's is taken (`schedule`), never the other way round.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Protocol

__all__ = ["DEFAULT_THREADS", "PageSyncPool", "default_pool"]

log = logging.getLogger("pagemq.paging")

DEFAULT_THREADS = 4
"""Batches written and fsynced at once: a few fsyncs in flight keep a disk's queue busy
(more do not add throughput on one device), and the pool stays small whatever the number of
addresses."""


class Scheduled(Protocol):
    """What the pool runs: a page writer (`PageWriter.run_batch`)."""

    def run_batch(self, due: float) -> None: ...


class PageSyncPool:
    """Threads that run page writers' batches, earliest due first."""

    def __init__(self, threads: int = DEFAULT_THREADS, name: str = "pagemq-page-writer") -> None:
        if threads < 1:
            raise ValueError("a page sync pool needs at least one thread")
        self.max_threads = threads
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Scheduled]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._stopping = False

    def schedule(self, writer: Scheduled, due: float) -> None:
        """Run `writer.run_batch(due)` at `due` (time.monotonic), or as soon as a thread is free."""
        with self._cond:
            if self._stopping:
                raise RuntimeError("page sync pool is shut down")
            first = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, next(self._seq), writer))
            if threading.current_thread() in self._threads:
                # A pool thread at the end of a batch (its writer's next one): it looks at the
                # heap before it waits again, so neither a new thread nor a wake-up is needed
                # (each would take the GIL from the loop for nothing).
                return
            if self._idle == 0 and len(self._threads) < self.max_threads:
                self._start_thread()
            elif first or self._idle > 1:
                self._cond.notify()

    @property
    def threads(self) -> int:
        return len(self._threads)

    def shutdown(self) -> None:
        """End the threads once nothing is scheduled; the writers must have stopped."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()
        with self._cond:
            self._threads.clear()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._run, name=f"{self.name}-{len(self._threads) + 1}",
                                  daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                try:
                    while True:
                        if self._heap:
                            delay = self._heap[0][0] - time.monotonic()
                            if delay <= 0:
                                break
                            self._cond.wait(delay)
                        elif self._stopping:
                            return
                        else:
                            self._cond.wait()
                finally:
                    self._idle -= 1
                due, _seq, writer = heapq.heappop(self._heap)
                if self._heap:  # the next one may be due while this batch is written
                    if self._idle:
                        self._cond.notify()
                    elif len(self._threads) < self.max_threads:
                        self._start_thread()  # e.g. one this thread scheduled itself
            try:
                writer.run_batch(due)
            except Exception:  # a bug in one writer must not end a thread all others share
                log.exception("paging: page writer batch failed unexpectedly")


_default: PageSyncPool | None = None
_default_lock = threading.Lock()


def default_pool() -> PageSyncPool:
    """The process's pool for page stores made without one (tools, tests): daemon threads,
    never shut down. The broker makes and shuts down its own (`server/app.py`)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = PageSyncPool(name="pagemq-page-writer-default")
        return _default
