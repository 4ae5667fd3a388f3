"""The row shape of the pagemq source, as Spark and Arrow see it.

Spark compares the schema of each Arrow batch a Python source yields with the one it
declared, field for field (types, UTC timestamps, nullability): the two here are kept
equal by `tests/spark/test_batch_read.py`.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ARROW_SCHEMA", "COLUMNS", "READ_SCHEMA", "timestamps"]

# The read schema (docs/spark.md), in Spark's DDL.
READ_SCHEMA = (
    "message_id string, address string, queue string, seq long, timestamp timestamp, priority int, "
    "persistent boolean, headers map<string,string>, body binary"
)

ARROW_SCHEMA = pa.schema([
    pa.field("message_id", pa.string()),
    pa.field("address", pa.string()),
    pa.field("queue", pa.string()),
    pa.field("seq", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("priority", pa.int32()),
    pa.field("persistent", pa.bool_()),
    pa.field("headers", pa.map_(pa.string(), pa.string())),
    pa.field("body", pa.binary()),
])

COLUMNS = tuple(ARROW_SCHEMA.names)

_TIMESTAMP = ARROW_SCHEMA.field("timestamp").type
_MICROS_PER_MILLI = pa.scalar(1000, pa.int64())


def timestamps(millis: pa.Array) -> pa.Array:
    """The `timestamp` column from epoch milliseconds (int64).

    Compute calls here take typed scalars: given a Python number or string, pyarrow tries
    (and fails, without pandas) to import `dateutil` on each call, ~150 µs every time, more
    on an executor whose `sys.path` starts with Spark's zip files."""
    return pc.multiply(millis, _MICROS_PER_MILLI).cast(_TIMESTAMP)
