"""The "pagemq" data source: `spark.read` over page files, `readStream` from live brokers
(`stream`), `write`/`writeStream` to a broker.

Spark creates the data source from the options in a Python worker at `load()` (`schema`)
and at `save()`/`start()` (`writer`), so the options are checked there and a bad one fails
the call that named it. The batch reader's work is in `page_scan` (no Spark in it), the
sink's in `sink`. docs/spark.md is the user's side of all this.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pagemq.spark.bounds import Bounds
from pagemq.spark.page_scan import FileTask, ScanOptions, plan_scan, read_file
from pagemq.spark.schema import READ_SCHEMA
from pagemq.spark.sink import BatchWriter, SinkOptions, StreamWriter, probe
from pagemq.spark.stream import (
    StreamOptions,
    StreamReader,
    is_stream_read,
    latest_offsets,
    prepare,
    require_location,
)

__all__ = ["JVM_SCAN_NAME", "JvmScanDataSource", "PagemqDataSource"]

JVM_SCAN_NAME = "pagemq_jvm_scan"  # io.pagemq.spark.PagemqProvider.PYTHON_NAME

log = logging.getLogger("pagemq.spark")

_PUSHED_COLUMNS = ("seq", "timestamp", "priority")

# READ_SCHEMA as a StructType: a Python worker has no session to parse DDL with.
READ_STRUCT = StructType([
    StructField("message_id", StringType()),
    StructField("address", StringType()),
    StructField("queue", StringType()),
    StructField("seq", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("priority", IntegerType()),
    StructField("persistent", BooleanType()),
    StructField("headers", MapType(StringType(), StringType())),
    StructField("body", BinaryType()),
])


class PagemqDataSource(DataSource):
    """Registered as "pagemq" by `pagemq.spark.register`."""

    @classmethod
    def name(cls) -> str:
        return "pagemq"

    def schema(self) -> StructType:
        """At load(): a bad option fails there, named. A stream's brokers are asked, its
        durable subscription is made (a message published once load() has returned is the
        query's, however long Spark takes to start the query), and `startingOffsets=latest`
        is fixed (a message sent after load() is read, not skipped and acknowledged unread).
        This instance travels to the query pickled, with what was found."""
        if is_stream_read(self.options):
            options = StreamOptions.parse(self.options)
            prepare(options, create=False, wait=False)  # an existing subscription checked, named
            if options.queue is None:
                prepare(options, create=True, wait=False)
            if options.starting == "latest":
                self.latest_at_load = latest_offsets(options)
        else:
            require_location(self.options)
            ScanOptions.parse(self.options)
        return READ_STRUCT

    def reader(self, schema: StructType) -> DataSourceReader:
        scan = ScanOptions.parse(self.options)
        if schema != READ_STRUCT:
            raise ValueError(f"the pagemq source has a fixed schema ({READ_SCHEMA}); "
                             f"got {schema.simpleString()}")
        return PageFileReader(scan)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """`readStream`: made at start() on the driver; a durable subscription is made here."""
        options = StreamOptions.parse(self.options)
        if schema != READ_STRUCT:
            raise ValueError(f"the pagemq source has a fixed schema ({READ_SCHEMA}); "
                             f"got {schema.simpleString()}")
        prepare(options, create=True)
        return StreamReader(options, getattr(self, "latest_at_load", None))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # as Spark's Kafka sink: a queue's messages cannot be replaced
            raise ValueError("the pagemq sink appends messages to a queue: save mode overwrite is not "
                             "supported: use mode('append')")
        options = SinkOptions.parse(self.options, schema)
        probe(options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = SinkOptions.parse(self.options, schema)
        probe(options)
        return StreamWriter(options)


class JvmScanDataSource(PagemqDataSource):
    """This source when pagemq's JVM provider is "pagemq" (docs/spark.md "The JVM reader"):
    the same source, under the name that provider delegates to."""

    @classmethod
    def name(cls) -> str:
        return JVM_SCAN_NAME


class FilePartition(InputPartition):
    """One page file (`FileTask`) to read.

    Pickled as a call of `_file_partition` on the task's fields as plain values, so that
    pagemq's JVM reader (jvm/, docs/spark.md "The JVM reader") can take the task from the
    pickled partition Spark holds without Python."""

    def __init__(self, task: FileTask) -> None:
        super().__init__(task.page_no)
        self.task = task

    def __reduce__(self) -> tuple[Any, ...]:
        task = self.task
        fields = {name: getattr(task, name) for name in FileTask.__dataclass_fields__}
        fields["committed"] = sorted(task.committed)
        fields["queue_names"] = dict(task.queue_names)
        return (_file_partition, (fields,))


def _file_partition(fields: dict[str, Any]) -> FilePartition:
    """A `FilePartition` from its pickled fields (`FilePartition.__reduce__`)."""
    values = dict(fields, committed=frozenset(fields["committed"]))
    return FilePartition(FileTask(**values))


class PageFileReader(DataSourceReader):
    """Plans one partition per page file the pushed filters and the selector may match."""

    def __init__(self, scan: ScanOptions) -> None:
        self.scan = scan
        self.bounds = Bounds()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Filters on `seq`, `timestamp` and `priority` skip whole files; all are returned,
        so Spark still applies each to the rows of the files that are read."""
        for item in filters:
            self.bounds = narrowed(self.bounds, item)
        return filters

    def partitions(self) -> Sequence[InputPartition]:
        plan = plan_scan(self.scan, self.bounds)
        log.info("pagemq batch read of %r: %d page file(s), %d skipped by the filters and selector, "
                 "%d to read", self.scan.address, plan.files, plan.skipped, len(plan.tasks))
        return [FilePartition(task) for task in plan.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilePartition):  # no file at all: Spark's one empty partition
            return iter(())
        return read_file(partition.task)


def narrowed(bounds: Bounds, item: Filter) -> Bounds:
    """`bounds` with what one pushed filter says about `seq`, `timestamp` or `priority`."""
    attribute: tuple[str, ...] = getattr(item, "attribute", ())
    if len(attribute) != 1 or attribute[0] not in _PUSHED_COLUMNS:
        return bounds
    column = attribute[0]
    value: Any = getattr(item, "value", None)
    if isinstance(item, In):
        values = [_integer(v) for v in value]
        if any(v is None for v in values):
            return bounds
        return bounds.with_range(column, values=frozenset(v for v in values if v is not None))
    number = _integer(value)
    if number is None:
        return bounds
    if isinstance(item, EqualTo | EqualNullSafe):
        return bounds.with_range(column, number, number)
    if isinstance(item, GreaterThan):
        return bounds.with_range(column, low=number + 1)
    if isinstance(item, GreaterThanOrEqual):
        return bounds.with_range(column, low=number)
    if isinstance(item, LessThan):
        return bounds.with_range(column, high=number - 1)
    if isinstance(item, LessThanOrEqual):
        return bounds.with_range(column, high=number)
    return bounds


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _integer(value: object) -> int | None:
    """An int for a seq or priority literal, microseconds since the epoch for a timestamp
    (Spark hands those over as aware datetimes; a naive one is taken as UTC)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
        return (aware - _EPOCH) // datetime.timedelta(microseconds=1)
    return None
