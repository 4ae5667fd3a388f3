package io.pagemq.spark;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The rows of one walked page file, in file (seq) order, as the Python reader makes them
 * (pagemq/spark/page_scan.py has what each column is): message_id, address, queue, seq,
 * timestamp, priority, persistent, headers, body.
 */
final class PageRowReader implements PartitionReader<InternalRow> {

  private static final int ORDINAL_BITS = 32;

  private final PageRecords records;
  private final UTF8String address;
  private final long seqBase;
  private final boolean headers;
  private final Map<Long, String> queueNames;
  private final Map<Long, UTF8String> queueOfOne = new HashMap<>();
  private int next = -1;

  PageRowReader(PageTask task, PageRecords records) {
    this.records = records;
    this.address = UTF8String.fromString(task.address);
    this.seqBase = task.pageNo << ORDINAL_BITS;
    this.headers = task.includeHeaders;
    this.queueNames = task.queueNames;
  }

  @Override
  public boolean next() {
    return ++next < records.count;
  }

  @Override
  public InternalRow get() {
    byte[] data = records.data;
    int entry = records.entryAt[next];
    int message = records.messageAt[next];
    int pairs = PageRecords.u16(data, message + 28);
    int text = (int) PageRecords.u32(data, message + 30);
    int body = (int) PageRecords.u32(data, message + 34);
    int lengths = message + PageRecords.CODEC_HEAD;
    int textAt = lengths + 6 * pairs;
    int bodyAt = textAt + text;
    Object[] row = new Object[9];
    row[0] = UTF8String.fromString(Long.toUnsignedString(PageRecords.u64(data, entry + 1)));
    row[1] = address;
    row[2] = queue(data, entry);
    row[3] = seqBase | records.ordinal[next];
    row[4] = PageRecords.u64(data, message + 20) * 1000L; // ms to Spark's microseconds
    row[5] = data[message + 2] & 0xff;
    row[6] = (data[entry] & 1) != 0;
    row[7] = headers ? headerMap(data, lengths, textAt, pairs) : null;
    row[8] = Arrays.copyOfRange(data, bodyAt, bodyAt + body);
    return new GenericInternalRow(row);
  }

  /** The names of the queues the entry was routed to that the journal knows, comma-joined. */
  private UTF8String queue(byte[] data, int entry) {
    int queues = PageRecords.u16(data, entry + 9);
    if (queues == 1) {
      long id = PageRecords.u64(data, entry + PageRecords.ENTRY_HEAD);
      return queueOfOne.computeIfAbsent(id, key -> {
        String name = queueNames.get(key);
        return name == null ? null : UTF8String.fromString(name);
      });
    }
    StringBuilder names = new StringBuilder();
    for (int i = 0; i < queues; i++) {
      String name = queueNames.get(PageRecords.u64(data, entry + PageRecords.ENTRY_HEAD + 8 * i));
      if (name != null) {
        names.append(names.length() > 0 ? "," : "").append(name);
      }
    }
    return names.length() == 0 ? null : UTF8String.fromString(names.toString());
  }

  private static MapData headerMap(byte[] data, int lengths, int textAt, int pairs) {
    Object[] keys = new Object[pairs];
    Object[] values = new Object[pairs];
    int pos = textAt;
    for (int i = 0; i < pairs; i++) {
      int key = PageRecords.u16(data, lengths + 6 * i);
      int value = (int) PageRecords.u32(data, lengths + 6 * i + 2);
      keys[i] = UTF8String.fromBytes(data, pos, key);
      values[i] = UTF8String.fromBytes(data, pos + key, value);
      pos += key + value;
    }
    return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
  }

  @Override
  public void close() {
  }
}
