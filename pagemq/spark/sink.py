"""The sink: each Spark task sends its partition's rows to the broker as STOMP messages.

A row is a message: its `body` column (binary, or string sent as UTF-8; null sends an empty
body) and, if the frame has one, its `headers` column (map<string,string>) as STOMP headers.
Other columns are not sent. Messages are persistent unless `persistent=false`, so a
RECEIPT, which the task waits for before it reports success, means the message is on disk.

Each message carries `_AMQ_DUPL_ID` (Artemis' duplicate-detection header), made from who
wrote it: `spark:<job>:<batch>:<partition>:<row>`. For `writeStream` the job is the query
id, which a restart from the checkpoint keeps, and the batch is the micro-batch id, which a
re-run batch keeps; for a batch `write` the job is the `jobId` option or an id drawn once
per `save()` on the driver (so every attempt of every task of one save shares it), and the
batch is 0. The row is the row's index in its partition. A retried task therefore stamps
the same ids on the same rows (as long as the partition's rows come in the same order, as
they do from a deterministic plan), and a broker with duplicate detection stores each once.

Rows go out in STOMP transactions of `transactionSize` rows (at most `TRANSACTION_BYTES` of
bodies, and never more than `receiptWindow`), each a BEGIN, the SENDs and a COMMIT asking
for a receipt, several in flight at once: the broker stores a transaction's messages with
one write and checks their duplicate ids at COMMIT, and the frames are encoded by Arrow
(`send_frames`), not row by row. To a pagemq broker a transaction's rows go as one batch
SEND (`protocol.stomp.batch`, asked for at CONNECT; `batchSends=false` turns it off), which
saves the broker parsing each row's frame. A task that dies leaves its open transaction
uncommitted: the broker drops it, and the retry sends those rows again.
`transactionSize=0` sends each row as its own receipted SEND instead.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from pagemq.spark.options import MAX_TIMEOUT, PagemqOptionError, check_known, flag, number, required, text
from pagemq.spark.send_frames import (
    OWN_HEADERS,
    SendTemplate,
    batch_headers,
    body_column,
    encode_batch_send,
    encode_sends,
    split_rows,
)
from pagemq.spark.stomp_sender import StompSender, StompSendError, parse_stomp_url

__all__ = ["DUPLICATE_ID_HEADER", "BatchWriter", "SentRows", "SinkOptions", "StreamWriter", "duplicate_id",
           "probe"]

log = logging.getLogger("pagemq.spark")

DUPLICATE_ID_HEADER = "_AMQ_DUPL_ID"
_OWN_HEADERS = frozenset(OWN_HEADERS)
_FRAMING = pa.scalar(8, pa.int32())  # a row's bytes besides body and headers (typed: schema.timestamps)
TRANSACTION_BYTES = 1 << 20  # bodies per transaction: what the broker stages until COMMIT
SINK_OPTIONS = ("url", "address", "destination", "user", "password", "persistent", "receiptWindow",
                "transactionSize", "receiptTimeout", "jobId", "batchSends")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """A write's options, checked on the driver at `save()` / `start()`."""

    host: str
    port: int
    destination: str
    login: str | None
    passcode: str | None
    persistent: bool
    window: int
    timeout: float
    job_id: str | None
    has_headers: bool
    transaction_size: int = 1000
    batch_sends: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        """PagemqOptionError naming the option (or column) for anything missing or wrong."""
        check_known(options, SINK_OPTIONS, "sink")
        url = required(options, "url", "the broker's STOMP endpoint, stomp://HOST:PORT")
        try:
            host, port = parse_stomp_url(url)
        except ValueError as exc:
            raise PagemqOptionError("url", str(exc)) from None
        address, destination = text(options, "address"), text(options, "destination")
        if address is not None and destination is not None:
            raise PagemqOptionError("destination", "give either address or destination, not both")
        if destination is None:
            if address is None:
                raise PagemqOptionError("address", "required (the anycast queue to send to), or a "
                                                   "destination option instead")
            destination = f"/queue/{address}"
        elif (destination.startswith("/") and not destination.startswith(("/queue/", "/topic/"))) or \
                destination in ("/queue/", "/topic/"):
            raise PagemqOptionError("destination", f"{destination!r}: a STOMP destination is /queue/NAME, "
                                                   "/topic/NAME or a bare NAME")
        return cls(host, port, destination, text(options, "user"), text(options, "password"),
                   flag(options, "persistent", True),
                   int(number(options, "receiptWindow", 4000, minimum=1, integer=True)),
                   number(options, "receiptTimeout", 30.0, minimum=0.001, maximum=MAX_TIMEOUT),
                   text(options, "jobId"), _check_columns(schema),
                   int(number(options, "transactionSize", 1000, minimum=0, integer=True)),
                   flag(options, "batchSends", True))


_COLUMNS = ("body", "headers")


def _check_columns(schema: StructType) -> bool:
    """Whether the rows have a `headers` column; ValueError naming a bad `body`/`headers`."""
    fields = {field.name: field for field in schema.fields}
    for name in fields:  # else a 'Headers' column would be left out without a word
        if name.lower() in _COLUMNS and name not in _COLUMNS:
            raise ValueError(f"the pagemq sink's columns are named exactly 'body' and 'headers', as "
                             f"Spark's Kafka sink names 'value': rename {name!r} to {name.lower()!r}")
    body = fields.get("body")
    if body is None or not isinstance(body.dataType, BinaryType | StringType):
        found = "none" if body is None else body.dataType.simpleString()
        raise ValueError(f"the pagemq sink needs a 'body' column of type binary or string (found: {found})")
    headers = fields.get("headers")
    if headers is None:
        return False
    kind = headers.dataType
    if not (isinstance(kind, MapType) and isinstance(kind.keyType, StringType)
            and isinstance(kind.valueType, StringType)):
        raise ValueError("the pagemq sink's 'headers' column must be map<string,string> "
                         f"(found: {kind.simpleString()})")
    return True


@dataclass(frozen=True)
class SentRows(WriterCommitMessage):
    """What one task stored: its partition and how many messages the broker confirmed."""

    partition: int
    rows: int


def duplicate_id(job: str, batch: int | str, partition: int, row: int | str) -> str:
    return f"spark:{job}:{batch}:{partition}:{row}"


def send_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], job: str, batch: int | str
                   ) -> SentRows:
    """Send every row of this task's partition; return once the broker confirmed them all."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    template = SendTemplate(options.destination, persistent=options.persistent,
                            duplicate_prefix=duplicate_id(job, batch, partition, ""))
    rows_per_transaction = min(options.transaction_size, options.window)
    row = 0
    with StompSender(options.host, options.port, login=options.login, passcode=options.passcode,
                     window=options.window, timeout=options.timeout) as sender:
        for record_batch in batches:
            if not rows_per_transaction:
                row = _send_one_by_one(options, sender, record_batch, template, row)
                continue
            bodies = body_column(record_batch)
            headers = record_batch.column("headers") if options.has_headers else None
            if sender.batches and options.batch_sends:
                _send_batches(sender, template, bodies, headers, row, rows_per_transaction)
                row += len(bodies)
                continue
            lengths = pc.binary_length(bodies).to_pylist()
            for start, stop in split_rows(lengths, rows_per_transaction, TRANSACTION_BYTES):
                transaction = sender.next_transaction()
                frames = encode_sends(template, bodies.slice(start, stop - start),
                                      None if headers is None else headers.slice(start, stop - start),
                                      row + start, transaction)
                sender.send_transaction(transaction, frames, stop - start)
            row += len(bodies)
        sender.flush()
    return SentRows(partition, row)


def _send_batches(sender: StompSender, template: SendTemplate, bodies: pa.Array, headers: pa.Array | None,
                  row: int, rows_per_transaction: int) -> None:
    """Rows `row`, `row + 1`, ... in transactions of one batch SEND each (a pagemq broker),
    each frame within the broker's max-frame-size."""
    own = batch_headers(template, headers, row, len(bodies))
    sizes = pc.add(pc.add(pc.binary_length(bodies), pc.binary_length(own)), _FRAMING).to_pylist()
    head = len(template.batch_head("t" * 20, 1 << 40)) + 16  # the frame's head, and its count
    limit = max(1, min(TRANSACTION_BYTES, sender.max_frame_size - head))
    for start, stop in split_rows(sizes, rows_per_transaction, limit):
        transaction, count = sender.next_transaction(), stop - start
        if count == 1 and sizes[start] > limit:  # too large for a batch: as a SEND it may still fit
            own_headers = None if headers is None else headers.slice(start, 1)
            frame = encode_sends(template, bodies.slice(start, 1), own_headers, row + start, transaction)
        else:
            frame = encode_batch_send(template, bodies.slice(start, count), own.slice(start, count),
                                      transaction)
        sender.send_transaction(transaction, frame, count)


def _send_one_by_one(options: SinkOptions, sender: StompSender, record_batch: pa.RecordBatch,
                     template: SendTemplate, row: int) -> int:
    """`transactionSize=0`: each row its own SEND with a receipt; the next row's index."""
    persistent = [("persistent", "true")] if options.persistent else []
    bodies = body_column(record_batch).to_pylist()
    header_maps = (record_batch.column("headers").to_pylist() if options.has_headers
                   else [None] * len(bodies))
    for body, pairs in zip(bodies, header_maps, strict=True):
        # the first of a repeated header wins: a row's own `persistent` beats the option
        headers = [*_user_headers(pairs), *persistent,
                   (DUPLICATE_ID_HEADER, f"{template.duplicate_prefix}{row}")]
        sender.send(options.destination, headers, body)
        row += 1
    return row


def _user_headers(pairs: list[tuple[str, str | None]] | None) -> list[tuple[str, str]]:
    if not pairs:
        return []
    return [(key, value) for key, value in pairs if value is not None and key not in _OWN_HEADERS]


def probe(options: SinkOptions) -> None:
    """On the driver, at save() / start(): connect (and log in) once, so an unreachable broker
    or a refused login fails there, naming the option, rather than in every task."""
    try:
        StompSender(options.host, options.port, login=options.login, passcode=options.passcode,
                    timeout=min(options.timeout, 10.0)).connect().close()
    except StompSendError as exc:
        message = str(exc)
        option = "user" if message.startswith("pagemq option 'user'") else "url"
        raise PagemqOptionError(option, message.split(": ", 1)[1]) from None


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("pagemq")`: made once per save() on the driver, pickled to tasks."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.job = options.job_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentRows:
        return send_partition(self.options, iterator, self.job, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.rows for m in messages if isinstance(m, SentRows))
        log.info("pagemq sink: job %s stored %d message(s) to %s", self.job, sent, self.options.destination)


class StreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("pagemq")`: ids from the query id and the micro-batch id."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.fallback_job = options.job_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentRows:
        context = TaskContext.get()
        query = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        return send_partition(self.options, iterator, query or self.fallback_job, batch or 0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.rows for m in messages if isinstance(m, SentRows))
        log.info("pagemq sink: micro-batch %d stored %d message(s) to %s", batchId, sent,
                 self.options.destination)
