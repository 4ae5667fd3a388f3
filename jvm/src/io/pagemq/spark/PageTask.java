package io.pagemq.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import net.razorvine.pickle.IObjectConstructor;
import net.razorvine.pickle.Unpickler;

/**
 * What the JVM reader needs of one planned page file: the fields of the Python reader's
 * {@code FileTask}, taken from the pickled Python partition. The Python side pickles its
 * partitions as a call of {@code pagemq.spark.source._file_partition} on a dict of plain
 * values (page_scan.FileTask's fields), so they unpickle here without Python.
 */
final class PageTask implements Serializable {
  private static final long serialVersionUID = 1L;

  static final String MODULE = "pagemq.spark.source";
  static final String FUNCTION = "_file_partition";

  static {
    Unpickler.registerConstructor(MODULE, FUNCTION, new FieldsOf());
  }

  final String path;
  final long pageNo;
  final long limit;
  final long[] committed; // sorted transaction ids whose TX_BATCH records in this page committed
  final String address;
  final Map<Long, String> queueNames;
  final boolean includeHeaders;
  final String movedTo; // where the file is once archived, or null

  private PageTask(Map<?, ?> fields) {
    path = (String) fields.get("path");
    pageNo = number(fields.get("page_no"));
    limit = number(fields.get("limit"));
    List<?> txids = (List<?>) fields.get("committed");
    committed = new long[txids.size()];
    for (int i = 0; i < committed.length; i++) {
      committed[i] = number(txids.get(i));
    }
    Arrays.sort(committed);
    address = (String) fields.get("address");
    queueNames = new HashMap<>();
    for (Map.Entry<?, ?> name : ((Map<?, ?>) fields.get("queue_names")).entrySet()) {
      queueNames.put(number(name.getKey()), (String) name.getValue());
    }
    includeHeaders = Boolean.TRUE.equals(fields.get("include_headers"));
    movedTo = (String) fields.get("moved_to");
  }

  boolean committed(long txid) {
    return Arrays.binarySearch(committed, txid) >= 0;
  }

  /**
   * The task a pickled Python partition holds, or null when it is not a page file's (Spark's
   * empty partition) or carries a selector: those are the Python reader's.
   */
  static PageTask fromPickle(byte[] pickled) {
    Object value;
    try {
      value = new Unpickler().loads(pickled);
    } catch (Exception e) { // a partition of another shape: Python reads it
      return null;
    }
    if (!(value instanceof Fields fields) || fields.map.get("selector") != null) {
      return null;
    }
    return new PageTask(fields.map);
  }

  private static long number(Object value) {
    return ((Number) value).longValue();
  }

  private record Fields(Map<?, ?> map) {}

  private static final class FieldsOf implements IObjectConstructor {
    @Override
    public Object construct(Object[] args) {
      return args.length == 1 && args[0] instanceof Map<?, ?> map ? new Fields(map) : null;
    }
  }
}
