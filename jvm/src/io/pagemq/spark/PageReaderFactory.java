package io.pagemq.spark;

import java.io.IOException;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * Reads a page file in the JVM when every byte of it is what the reader knows (format 2,
 * intact frames, messages that decode); anything else (damage, a torn tail, a format-1 page,
 * a file moved or deleted since planning, header text that is not UTF-8) is read by the
 * Python reader, decided before any row is returned, so damage is reported (or read past,
 * with failOnDataLoss=false) in one place, exactly as without this jar.
 */
final class PageReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final PartitionReaderFactory python;
  private final StructType full; // the source's schema: the Python reader's rows
  private final int[] columns; // the columns to return, by position in `full`

  PageReaderFactory(PartitionReaderFactory python, StructType full, int[] columns) {
    this.python = python;
    this.full = full;
    this.columns = columns;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    PagePartition page = (PagePartition) partition;
    if (page.task != null) {
      PageRecords records;
      try {
        records = PageRecords.read(page.task);
      } catch (IOException e) {
        records = null; // the Python reader meets the same trouble and says what it is
      }
      if (records != null) {
        return new PageRowReader(page.task, records, columns);
      }
    }
    return new Pruned(python.createReader(page.python), full, columns);
  }

  /** The Python reader's rows, cut to the columns the query reads. */
  private static final class Pruned implements PartitionReader<InternalRow> {
    private final PartitionReader<InternalRow> rows;
    private final DataType[] types;
    private final int[] columns;

    Pruned(PartitionReader<InternalRow> rows, StructType full, int[] columns) {
      this.rows = rows;
      this.columns = columns;
      this.types = new DataType[columns.length];
      for (int i = 0; i < columns.length; i++) {
        types[i] = full.fields()[columns[i]].dataType();
      }
    }

    @Override
    public boolean next() throws IOException {
      return rows.next();
    }

    @Override
    public InternalRow get() {
      InternalRow row = rows.get();
      Object[] values = new Object[columns.length];
      for (int i = 0; i < columns.length; i++) {
        // a copy of each value: the reader's row and what it points into are reused
        values[i] = row.isNullAt(columns[i]) ? null : InternalRow.copyValue(row.get(columns[i], types[i]));
      }
      return new GenericInternalRow(values);
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      return rows.currentMetricsValues();
    }

    @Override
    public void close() throws IOException {
      rows.close();
    }
  }
}
