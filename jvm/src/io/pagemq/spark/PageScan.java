package io.pagemq.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.types.StructType;

/**
 * The Python scan, planned by Python (page files listed, filters and journal applied), with
 * its partitions read by {@link PageReaderFactory}. Metrics stay the Python scan's: a
 * partition handed back to Python reports them.
 */
final class PageScan implements Scan, Batch {

  private final Scan python;
  private final StructType schema; // the columns the query reads
  private final int[] columns; // their positions in the source's schema
  private Batch pythonBatch;

  PageScan(Scan python, StructType required) {
    this.python = python;
    StructType full = python.readSchema();
    this.schema = required == null ? full : required;
    this.columns = new int[schema.fields().length];
    for (int i = 0; i < columns.length; i++) {
      columns[i] = full.fieldIndex(schema.fields()[i].name());
    }
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "pagemq page files (JVM reader): " + python.description();
  }

  @Override
  public Batch toBatch() {
    pythonBatch = python.toBatch();
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return python.toMicroBatchStream(checkpointLocation);
  }

  @Override
  public ContinuousStream toContinuousStream(String checkpointLocation) {
    return python.toContinuousStream(checkpointLocation);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return python.supportedCustomMetrics();
  }

  @Override
  public CustomTaskMetric[] reportDriverMetrics() {
    return python.reportDriverMetrics();
  }

  @Override
  public InputPartition[] planInputPartitions() {
    InputPartition[] planned = pythonBatch.planInputPartitions();
    InputPartition[] partitions = new InputPartition[planned.length];
    for (int i = 0; i < planned.length; i++) {
      PythonInputPartition partition = (PythonInputPartition) planned[i];
      partitions[i] = new PagePartition(partition, PageTask.fromPickle(partition.pickedPartition()));
    }
    return partitions;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new PageReaderFactory(pythonBatch.createReaderFactory(), python.readSchema(), columns);
  }
}
