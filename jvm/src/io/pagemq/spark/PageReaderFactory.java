package io.pagemq.spark;

import java.io.IOException;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

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

  PageReaderFactory(PartitionReaderFactory python) {
    this.python = python;
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
        return new PageRowReader(page.task, records);
      }
    }
    return python.createReader(page.python);
  }
}
