package io.pagemq.spark;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Python source's table for a batch read of page files, whose scans read in the JVM
 * ({@link PageScan}); the rest is the Python table's.
 */
final class PageScanTable implements Table, SupportsRead, SupportsWrite {

  private final Table python;

  PageScanTable(Table python) {
    this.python = python;
  }

  /**
   * A read with a {@code path} is a batch read of page files (the stream reads from a
   * broker's {@code url}); one with a selector stays in Python, which evaluates selectors.
   */
  static boolean readsPageFiles(Map<String, String> options) {
    boolean path = false;
    for (Map.Entry<String, String> option : options.entrySet()) {
      String key = option.getKey();
      if (key.equalsIgnoreCase("selector") && option.getValue() != null
          && !option.getValue().isBlank()) {
        return false;
      }
      path |= key.equalsIgnoreCase("path");
    }
    return path;
  }

  @Override
  public String name() {
    return python.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return python.schema();
  }

  @Override
  public Column[] columns() {
    return python.columns();
  }

  @Override
  public Transform[] partitioning() {
    return python.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return python.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return python.capabilities();
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new Builder(((SupportsRead) python).newScanBuilder(options));
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return ((SupportsWrite) python).newWriteBuilder(info);
  }

  /**
   * The Python scan builder, whose pushed filters skip page files when it plans; the columns
   * a query needs are kept here (a Python source cannot prune), so the JVM reader writes
   * only those.
   */
  private static final class Builder implements SupportsPushDownFilters, SupportsPushDownRequiredColumns {
    private final ScanBuilder python;
    private StructType required;

    Builder(ScanBuilder python) {
      this.python = python;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
      return python instanceof SupportsPushDownFilters pushing ? pushing.pushFilters(filters) : filters;
    }

    @Override
    public Filter[] pushedFilters() {
      return python instanceof SupportsPushDownFilters pushing ? pushing.pushedFilters() : new Filter[0];
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    @Override
    public org.apache.spark.sql.connector.read.Scan build() {
      return new PageScan(python.build(), required);
    }
  }
}
