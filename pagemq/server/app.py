"""Start-up and shutdown order of a broker process.

Start: directories, store recovery, broker rebuilt from it, configured addresses, store
writer threads, then the acceptors; `ready` is logged only once every listener accepts.
Stop (SIGTERM/SIGINT): acceptors first (no new work), connections closed (their
unacknowledged deliveries return to queues), then the store is flushed and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

from pagemq.core.broker import Broker
from pagemq.core.memory import MemoryAccountant
from pagemq.core.selector.summary import PageSummary
from pagemq.core.settings import AddressSettings
from pagemq.security.access import Access
from pagemq.security.listener import ListenerPolicy
from pagemq.security.tls import ReloadableTls
from pagemq.security.users_watch import UsersWatcher
from pagemq.server.broker_history import BrokerHistory
from pagemq.server.cleanup_report import describe_cleanup
from pagemq.server.config import Config
from pagemq.server.connection_log import ConnectionLog
from pagemq.server.connections import connections_view, queue_deleted_listener
from pagemq.server.disk_monitor import DiskMonitor
from pagemq.server.loop_lag import LoopLag
from pagemq.server.memory_trim import MemoryTrimmer
from pagemq.server.stomp_server import StompServerProtocol, start_stomp_server
from pagemq.storage.fileio import REAL_FILE_IO, FileIO
from pagemq.storage.lock import BrokerLocks
from pagemq.storage.message_store import JournalMessageStore
from pagemq.storage.paging.page_io import PageIOWorker
from pagemq.storage.paging.page_recovery import remove_unfinished_folders
from pagemq.storage.paging.page_store import PageStore
from pagemq.storage.paging.page_sync_pool import PageSyncPool

log = logging.getLogger("pagemq")

EXPIRY_TICK_PERIOD = 1.0
AUTO_DELETE_PERIOD = 1.0  # auto-delete-queues / -addresses: how often idle ones are looked for
CLEANUP_CHECK_PERIOD = 0.25  # how often the journal is asked whether a cleanup is due
TRIM_CHECK_PERIOD = 1.0
STOP_SETTLE_SECONDS = 5.0  # how long a stop waits for dead-letter and expiry moves under way
GC_THRESHOLD = 20_000



class _AllConnections:
    """The STOMP connections of every listener (plain and TLS), read when iterated: the
    listeners' sets are made at start-up, after the views that read them."""

    def __init__(self, app: BrokerServer) -> None:
        self._app = app

    def __iter__(self) -> Iterator[StompServerProtocol]:
        yield from self._app._connections
        yield from self._app._tls_connections

class BrokerServer:
    def __init__(self, config: Config, *, fileio: FileIO = REAL_FILE_IO) -> None:
        """`fileio` is the storage layer's file seam (tests pass a `FaultyFileIO`)."""
        self.config = config
        self.fileio = fileio
        broker_config = config.broker
        self.store = JournalMessageStore(
            broker_config.journal_directory,
            file_size=broker_config.journal_file_size,
            sync=broker_config.journal_sync,
            archive_directory=(
                broker_config.data_directory / "archive" / "journal"
                if broker_config.archive_data_logs else None
            ),
            fileio=fileio,
        )
        self.archive_directory = (
            broker_config.data_directory / "archive" if broker_config.archive_data_logs else None
        )
        self.broker = Broker(
            config.address_settings,
            store=self.store,
            memory=MemoryAccountant(broker_config.global_max_size, broker_config.global_max_messages),
            page_stores=self._open_page_store,
        )
        self.broker.paging_directory = broker_config.paging_directory
        # Disk limits (seed 000 §9): the scan and the writers' ENOSPC reports set the core's
        # DiskGuard, which producers meet (server/disk_monitor.py, core/disk.py).
        self.broker.disk.policy = broker_config.disk_full_policy
        self.disk_monitor = DiskMonitor(
            self.broker.disk,
            {"journal": broker_config.journal_directory, "paging": broker_config.paging_directory},
            max_disk_usage=broker_config.max_disk_usage, min_disk_free=broker_config.min_disk_free,
            period=broker_config.disk_scan_period,
        )
        self.store.journal.on_space = self.disk_monitor.journal_space
        self._page_stores: list[PageStore] = []
        # Queues' page reads, for every address (storage/paging/page_io.py); made on first use.
        self._page_io: PageIOWorker | None = None
        # Page writes and fsyncs of every address (storage/paging/page_sync_pool.py): a few
        # threads, started on first use, not one per paging address.
        self._page_sync = PageSyncPool()
        self._stomp: asyncio.Server | None = None
        self._connections: set[StompServerProtocol] = set()
        self.connection_log = ConnectionLog()  # open/close lines and counts (/metrics)
        self._http = None
        self._tasks: list[asyncio.Task[None]] = []
        self._trimmer = MemoryTrimmer()
        self.loop_lag = LoopLag()
        # the console's 15-minute graphs (GET /api/broker/history)
        self.history = BrokerHistory(self.broker, self.store.stats, self.connection_log.figures,
                                     self.loop_lag.figures)
        self._lock = BrokerLocks(broker_config.data_directory, journal=broker_config.journal_directory,
                                 paging=broker_config.paging_directory)
        self.stopped = asyncio.Event()
        # Security (docs/security.md): None when disabled; TLS contexts for *-tls listeners.
        security = config.security
        self.access = Access(security.settings, security.users) if security.enabled else None
        self.tls = ReloadableTls(config.tls) if config.tls is not None else None
        self._stomp_tls: asyncio.Server | None = None
        self._tls_connections: set[StompServerProtocol] = set()
        self._users: UsersWatcher | None = None
        self._users_check: asyncio.Future[bool] | None = None
        self.state = "starting"  # -> "ready" -> "stopping" -> "stopped" (GET /health)

    async def start(self) -> None:
        started = time.monotonic()
        broker_config = self.config.broker
        # Before any other file is read or written: one broker per data directory (and
        # per journal and paging directory outside it).
        self._lock.acquire()
        for directory in (
            broker_config.data_directory, broker_config.journal_directory,
            broker_config.paging_directory,
        ):
            self.fileio.makedirs(directory)  # each new level's parent fsynced
        remove_unfinished_folders(broker_config.paging_directory, self.fileio)
        await self.disk_monitor.scan()  # a disk past its limit refuses producers from the start
        # Recovery makes a few objects per in-memory message, none of them garbage: the
        # collections their numbers would set off cost more than the rest of recovery, and
        # so would one full collection after it. So: collect what imports and set-up left
        # while that is all there is (milliseconds), none during recovery, and freeze what
        # it made (kept out of every later collection; see below).
        gc.collect()
        gc.disable()
        try:
            recovered = self.broker.recover()
        finally:
            gc.freeze()
            gc.enable()
        self.store.start(asyncio.get_running_loop())
        if stale := self.broker.forget_stale():
            # (No log line before the ready line may contain the word "ready": scripts wait for it.)
            log.info("deleted %d stale records (cursors of deleted pages, ids past id-cache-size)", stale)
        self._configure_addresses()
        acceptors = self.config.acceptors
        listening: list[str] = []
        if acceptors.stomp is not None:
            self._stomp, self._connections = await start_stomp_server(
                self.broker, self.config.stomp, acceptors.stomp.host, acceptors.stomp.port,
                self._policy("stomp"), connection_log=self.connection_log,
            )
            listening.append(f"stomp={acceptors.stomp.host}:{acceptors.stomp.port}")
        if acceptors.stomp_tls is not None and self.tls is not None:
            self._stomp_tls, self._tls_connections = await start_stomp_server(
                self.broker, self.config.stomp, acceptors.stomp_tls.host, acceptors.stomp_tls.port,
                self._policy("stomp-tls"), self.tls.context, connection_log=self.connection_log,
            )
            listening.append(f"stomp-tls={acceptors.stomp_tls}")
        every_connection = _AllConnections(self)
        self.broker.admin.on_queue_deleted.append(queue_deleted_listener(every_connection))
        http_tls = acceptors.http_tls if self.tls is not None else None
        if acceptors.http is not None or http_tls is not None:
            # aiohttp takes a good part of start-up to import: in a thread, so that STOMP
            # clients are served meanwhile (`ready` still waits for the HTTP listener).
            http_api = await asyncio.to_thread(importlib.import_module, "pagemq.integrations.http_api")
            plain = acceptors.http
            self._http = await http_api.start_http(
                self.broker, self.store.stats, plain.host if plain else None, plain.port if plain else 0,
                loop=self.loop_lag.figures, connections=self.connection_log.figures, access=self.access,
                max_connections=acceptors.max_connections, connect_timeout=acceptors.connect_timeout,
                tls=(http_tls.host, http_tls.port, self.tls.context) if http_tls and self.tls else None,
                connection_list=connections_view(every_connection), health=lambda: self.state,
                history=self.history.view,
            )
            if plain is not None:
                listening.append(f"http={plain.host}:{plain.port}")
            if http_tls is not None:
                listening.append(f"http-tls={http_tls}")
        self._tasks = [
            asyncio.create_task(self._cleanup_loop(broker_config.cleanup_period)),
            asyncio.create_task(self._every(EXPIRY_TICK_PERIOD, self.broker.expire_due)),
            *([asyncio.create_task(self._every(broker_config.message_expiry_scan_period,
                                               self.broker.expire_paged))]
              if broker_config.message_expiry_scan_period > 0 else []),
            asyncio.create_task(self._every(broker_config.disk_scan_period, self.disk_monitor.scan)),
            asyncio.create_task(self._every(
                AUTO_DELETE_PERIOD, lambda: self.broker.auto_delete.tick(time.monotonic())
            )),
            asyncio.create_task(self._every(self.history.interval, self.history.sample)),
            asyncio.create_task(self._every(
                TRIM_CHECK_PERIOD, lambda: self._trimmer.check(self.broker.memory.used_bytes)
            )),
        ]
        if self.access is not None and self.config.security.users_file is not None:
            self._users = UsersWatcher(self.config.security.users_file, self.access.replace_users)
            self._tasks.append(asyncio.create_task(self._users.run()))
        # `kill -HUP`: TLS certificates re-read (a renewed one needs no restart), the users
        # file looked at now; never the default action (which would end the broker).
        if _main_thread():  # an embedded broker on a thread of its own has no signals
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)
        # Messages are acyclic: collect young objects rarely, and keep start-up objects out
        # of every full collection (their cost grows with what the broker holds).
        gc.freeze()
        gc.set_threshold(GC_THRESHOLD, 20, 100)
        self._trimmer.baseline(self.broker.memory.used_bytes)
        self.loop_lag.start(asyncio.get_running_loop())  # from here on the loop serves clients
        self.history.sample()  # the graphs start at ready
        self.state = "ready"
        log.info(
            "ready: %s; recovered %d messages in %.2fs",
            " ".join(listening), recovered, time.monotonic() - started,
        )

    def reload(self) -> None:
        """SIGHUP: re-read what can change without a restart (docs/security.md)."""
        log.info("SIGHUP: reloading TLS certificates and the users file")
        if self.tls is not None:
            self.tls.reload()
        if self._users is not None:
            self._users_check = asyncio.ensure_future(self._users.check())  # kept while it runs

    def _policy(self, name: str) -> ListenerPolicy:
        acceptors = self.config.acceptors
        return ListenerPolicy(name, acceptors.max_connections, acceptors.connect_timeout, self.access)

    def _open_page_store(self, address: str, settings: AddressSettings) -> PageStore:
        broker_config = self.config.broker
        store = PageStore(
            broker_config.paging_directory, address,
            page_size_bytes=settings.page_size_bytes,
            sync_timeout=broker_config.page_sync_timeout,
            archive_directory=(
                self.archive_directory / "paging" if self.archive_directory is not None else None
            ),
            fileio=self.fileio,
            page_io=self._page_io_worker(),
            sync_pool=self._page_sync,
        )
        store.set_summary_builder(PageSummary)
        store.on_no_space = partial(self.disk_monitor.no_space, f"paging:{address}")
        store.on_backlog = self.broker.memory.page_writes  # paged sends wait past a bound
        store.open(defer_summaries=True)  # a scanned page's summary: by the writer, off the loop
        store.start(asyncio.get_running_loop())
        self._page_stores.append(store)
        return store

    def _page_io_worker(self) -> PageIOWorker:
        if self._page_io is None:
            self._page_io = PageIOWorker()
        return self._page_io

    def _configure_addresses(self) -> None:
        broker = self.broker
        broker.auto_delete.configured(
            (a.name for a in self.config.addresses),
            (q.name for a in self.config.addresses for q in a.queues),
        )
        for address_config in self.config.addresses:
            address = broker.ensure_address(address_config.name, address_config.routing_type, auto=False)
            for queue_config in address_config.queues:  # an anycast one has at least its own
                broker.ensure_queue(
                    address, queue_config.name, address_config.routing_type,
                    filter_text=queue_config.filter, durable=queue_config.durable,
                )

    async def _every(self, period: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(period)
            result = job()
            if asyncio.iscoroutine(result):
                await result

    async def _cleanup_loop(self, period: float) -> None:
        """Journal cleanup: once right after start-up — recovery has just proved which files
        are spent, and a broker killed before its first period would otherwise replay them
        again at every start, ever more of them — then every `cleanup-period`, and sooner
        whenever the journal has taken `cleanup_bytes` since the last one, so what a crash
        leaves to replay stays bounded however short the broker lives (issue 13, #14)."""
        await asyncio.sleep(0)  # after `ready`: start-up is not held up by it
        last = time.monotonic()
        await self._cleanup(after_start=True)
        while True:
            await asyncio.sleep(min(period, CLEANUP_CHECK_PERIOD))
            if time.monotonic() - last >= period:
                last = time.monotonic()
                await self._cleanup()
            elif self.store.cleanup_wanted():
                await self._cleanup(compact=False)  # spent files only: cheap under load

    async def _cleanup(self, *, after_start: bool = False, compact: bool = True) -> None:
        """File work in the journal's cleanup thread: the loop goes on serving meanwhile."""
        report = await self.store.cleanup_in_thread(compact=compact)
        # What this pass retired (or the file it rolled away from) may be removable once its
        # last writes are durable: a second pass now, rather than a cleanup-period later.
        try:
            # Shielded: the flush future is shared with every receipt waiting on the journal,
            # and cancelling this task at stop would otherwise cancel it for all of them
            # (the journal's own close then failed with CancelledError: model seed 51024).
            await asyncio.shield(self.store.flush())
        except OSError:
            return  # the journal failed and said so; nothing more to reclaim
        more = await self.store.cleanup_in_thread(compact=compact)
        report = {key: value + more.get(key, 0) for key, value in report.items()}
        if not any(report.values()):
            return
        notable = after_start or any(report.get(k) for k in ("compacted_files", "set_aside", "errors"))
        log.log(logging.INFO if notable else logging.DEBUG, "journal cleanup%s: %s",
                " after start-up" if after_start else "", describe_cleanup(report), extra=report)

    async def stop(self) -> None:
        self.state = "stopping"
        self.loop_lag.stop()
        for task in self._tasks:
            task.cancel()
        if self._stomp is not None:
            self._stomp.close()
        if self._stomp_tls is not None:
            self._stomp_tls.close()
        if _main_thread():
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        connections = [*self._connections, *self._tls_connections]
        for connection in connections:
            if connection.session is not None:
                connection.session.stop_deliveries()  # all first: see stop_deliveries
        for connection in connections:
            connection.close()
            # Ended now, not when the peer has closed too (up to CLOSE_GRACE later, with the
            # journal closed by then): deliveries given back write their counts, so one
            # outstanding at a stop comes back `redelivered:true` and counts an attempt.
            if connection.session is not None:
                connection.session.connection_lost()
        if self._http is not None:
            await self._http.cleanup()
        await asyncio.sleep(0)
        await self.broker.dead_letters.settled(timeout=STOP_SETTLE_SECONDS)
        self.broker.write_acks()
        # All at once: each close waits for its writer's last batch in the shared pool.
        await asyncio.gather(*(page_store.close() for page_store in self._page_stores))
        self._page_sync.shutdown()  # after every page store drained its writer
        if self._page_io is not None:
            self._page_io.shutdown()  # a read still in flight ends at once (its file handle)
        await self.store.close()
        if self.access is not None:
            self.access.close()
        self._lock.release()
        log.info("stopped")
        self.stopped.set()


def _main_thread() -> bool:
    """Signal handlers can only be set from the main thread (`BrokerServer` embedded in an
    application, as examples/ does, runs its loop on another)."""
    return threading.current_thread() is threading.main_thread()


async def _serve(config: Config) -> None:
    server = BrokerServer(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await server.start()
    await stop.wait()
    log.info("shutting down")
    await server.stop()


def serve(config: Config) -> int:
    try:
        import uvloop
    except ImportError:
        uvloop = None  # type: ignore[assignment]
    runner = uvloop.run if uvloop is not None else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(_serve(config))
    return 0
