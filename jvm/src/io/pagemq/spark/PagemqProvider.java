package io.pagemq.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;

/**
 * The "pagemq" data source when pagemq's jar is on Spark's class path.
 *
 * <p>Everything but the batch read of page files is the Python data source's, which
 * {@code pagemq.spark.register} registers as {@value #PYTHON_NAME}: option checks, planning,
 * the stream reader and the sink stay in one place. A batch read of page files is planned by
 * Python too; its partitions are then read here (one page file each, straight into Spark's
 * rows), because a Python source's rows cost Spark's JVM and the worker several microseconds
 * each to convert, which caps that path at about half of what a scan should carry.
 *
 * <p>Extending Spark's {@code PythonDataSourceV2} is what lets Spark treat this provider as
 * the Python source it wraps (it hands it the name it was asked for, which is mapped here).
 */
public class PagemqProvider extends PythonDataSourceV2 implements DataSourceRegister {

  /** The name the Python data source is registered under when this jar is loaded. */
  public static final String PYTHON_NAME = "pagemq_jvm_scan";

  public PagemqProvider() {
    super();
    super.setShortName(PYTHON_NAME);
  }

  @Override
  public String shortName() {
    return "pagemq";
  }

  /** Spark names the Python source it thinks this is ("pagemq"): it is set once, above. */
  @Override
  public void setShortName(String name) {
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Table table = super.getTable(schema, partitioning, properties);
    return PageScanTable.readsPageFiles(properties) ? new PageScanTable(table) : table;
  }

  /**
   * The Python source, looked up by every path (read, readStream, write); when it is not
   * there, Spark's "Data source 'pagemq_jvm_scan' not found" names a source the user never
   * wrote, so the error says what to do instead.
   */
  @Override
  public UserDefinedPythonDataSource source() {
    try {
      return super.source();
    } catch (Exception e) { // Spark's AnalysisException is checked, to Java
      if (String.valueOf(e.getMessage()).contains(PYTHON_NAME)) {
        throw new IllegalStateException("the pagemq data source is not registered in this Spark "
            + "session: call pagemq.spark.register(spark) (not spark.dataSource.register) after "
            + "making the session (" + e.getMessage() + ")", e);
      }
      throw e;
    }
  }
}
