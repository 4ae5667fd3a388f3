package io.pagemq.spark;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;

/** One page file: the Python partition as planned, and what the JVM reader needs of it. */
final class PagePartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final PythonInputPartition python;
  final PageTask task; // null: not a page file's partition (Spark's empty one): Python's to read

  PagePartition(PythonInputPartition python, PageTask task) {
    this.python = python;
    this.task = task;
  }
}
