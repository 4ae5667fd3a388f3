"""The row shape of the pagemq source, as Spark and Arrow see it.

Spark compares the schema of each Arrow batch a Python source yields with the one it
declared, field for field (types, UTC timestamps, nullability): the two here are kept
equal by `tests/spark/test_batch_read.py`.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ARROW_SCHEMA", "COLUMNS", "READ_SCHEMA"]

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
