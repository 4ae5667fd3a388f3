"""pagemq as a PySpark data source (format "pagemq"): batch reads of page files, and a sink.

PySpark is an optional dependency (`pip install 'pagemq[spark]'`): this package imports it
only when `register` is called, so `import pagemq` never does. docs/spark.md has the
options, the row schema and the guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FILTER_PUSHDOWN", "register"]

FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Register the data source named "pagemq" with `spark`, and turn on
    `spark.sql.python.filterPushdown.enabled` in its session configuration.

    That setting (off by default in Spark) is what lets Spark hand a query's filters to a
    Python data source: without it, filters on `seq`, `timestamp` and `priority` cannot skip
    page files and every file is read. It applies to every Python data source of the session.
    """
    from pagemq.spark.source import PagemqDataSource

    spark.dataSource.register(PagemqDataSource)
    spark.conf.set(FILTER_PUSHDOWN, "true")
