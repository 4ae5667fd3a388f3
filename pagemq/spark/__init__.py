"""pagemq as a PySpark data source (format "pagemq"): batch reads of page files, and a sink.

PySpark is an optional dependency (`pip install 'pagemq[spark]'`): this package imports it
only when `register` is called, so `import pagemq` never does. docs/spark.md has the
options, the row schema and the guarantees.

`JAR` is pagemq's JVM reader of page files (built from jvm/ by `make`): on Spark's class path
(`spark.jars`), batch reads of page files are read in the JVM; without it, in Python.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FILTER_PUSHDOWN", "JAR", "register"]

FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
JAR = str(Path(__file__).resolve().parent / "jars" / "pagemq-spark.jar")
JVM_PROVIDER = "io.pagemq.spark.PagemqProvider"

log = logging.getLogger("pagemq.spark")


def register(spark: SparkSession) -> None:
    """Register the data source named "pagemq" with `spark`, and turn on
    `spark.sql.python.filterPushdown.enabled` in its session configuration.

    That setting (off by default in Spark) is what lets Spark hand a query's filters to a
    Python data source: without it, filters on `seq`, `timestamp` and `priority` cannot skip
    page files and every file is read. It applies to every Python data source of the session.

    With `JAR` on the session's class path, "pagemq" is the JVM provider in it, which reads
    page files itself and hands everything else to this Python source, registered under the
    name that provider asks for.
    """
    from pagemq.spark.source import JvmScanDataSource, PagemqDataSource

    if jvm_reader_loaded(spark):
        spark.dataSource.register(JvmScanDataSource)
        log.info("pagemq: batch reads of page files in the JVM (%s)", JVM_PROVIDER)
    else:
        spark.dataSource.register(PagemqDataSource)
    spark.conf.set(FILTER_PUSHDOWN, "true")


def jvm_reader_loaded(spark: SparkSession) -> bool:
    """Whether Spark resolves "pagemq" to pagemq's JVM provider (`JAR` on `spark.jars`):
    asked the way Spark resolves a format name. Never with Spark Connect (no JVM here)."""
    jvm = getattr(spark, "_jvm", None)
    session = getattr(spark, "_jsparkSession", None)
    if jvm is None or session is None:
        return False
    try:
        found = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "pagemq", session.sessionState().conf())
        return bool(found.getName() == JVM_PROVIDER)
    except Exception:  # py4j's error: no such data source, so no jar
        return False
