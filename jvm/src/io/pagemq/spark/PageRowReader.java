package io.pagemq.spark;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeArrayWriter;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The rows of one walked page file, in file (seq) order, as the Python reader makes them
 * (pagemq/spark/page_scan.py has what each column is): message_id, address, queue, seq,
 * timestamp, priority, persistent, headers, body; only the columns the query reads.
 *
 * <p>Each row is written straight into Spark's binary row format, as Spark's generated
 * projections write one: no object per value, the page's bytes copied once. The row is
 * reused by the next call, as the rows of Spark's own projections and file readers are
 * (an operator that holds rows copies them).
 */
final class PageRowReader implements PartitionReader<InternalRow> {

  private static final int ORDINAL_BITS = 32;
  // the columns of the source's schema (pagemq/spark/schema.py), by position
  private static final int MESSAGE_ID = 0;
  private static final int ADDRESS = 1;
  private static final int QUEUE = 2;
  private static final int SEQ = 3;
  private static final int TIMESTAMP = 4;
  private static final int PRIORITY = 5;
  private static final int PERSISTENT = 6;
  private static final int HEADERS = 7;
  private static final int BODY = 8;

  private final PageRecords records;
  private final UTF8String address;
  private final long seqBase;
  private final boolean headers;
  private final Map<Long, String> queueNames;
  private final Map<Long, UTF8String> queueOfOne = new HashMap<>();
  private final int[] columns; // the columns to write, by position in the source's schema
  private final UnsafeRowWriter writer;
  private final UnsafeArrayWriter keys;
  private final UnsafeArrayWriter values;
  private final byte[] digits = new byte[20]; // a u64 in decimal, right-aligned
  private int next = -1;

  PageRowReader(PageTask task, PageRecords records, int[] columns) {
    this.records = records;
    this.columns = columns;
    this.writer = new UnsafeRowWriter(columns.length, 2048);
    this.keys = new UnsafeArrayWriter(writer, 8);
    this.values = new UnsafeArrayWriter(writer, 8);
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
    UnsafeRowWriter row = writer;
    row.reset(); // as Spark's generated projections start each top-level row
    row.zeroOutNullBytes();
    for (int out = 0; out < columns.length; out++) {
      switch (columns[out]) {
        case MESSAGE_ID -> {
          int length = decimal(PageRecords.u64(data, entry + 1));
          row.write(out, digits, digits.length - length, length); // a string: the bytes of binary
        }
        case ADDRESS -> row.write(out, address);
        case QUEUE -> {
          UTF8String queue = queue(data, entry);
          if (queue == null) {
            row.setNullAt(out);
          } else {
            row.write(out, queue);
          }
        }
        case SEQ -> row.write(out, seqBase | records.ordinal[next]);
        case TIMESTAMP -> row.write(out, PageRecords.u64(data, message + 20) * 1000L); // ms to µs
        case PRIORITY -> row.write(out, data[message + 2] & 0xff);
        case PERSISTENT -> row.write(out, (data[entry] & 1) != 0);
        case HEADERS -> {
          if (headers) {
            writeHeaders(out, data, message);
          } else {
            row.setNullAt(out);
          }
        }
        case BODY -> {
          int pairs = PageRecords.u16(data, message + 28);
          int bodyAt = message + PageRecords.CODEC_HEAD + 6 * pairs + (int) PageRecords.u32(data, message + 30);
          row.write(out, data, bodyAt, (int) PageRecords.u32(data, message + 34));
        }
        default -> throw new IllegalStateException("no column " + columns[out]);
      }
    }
    return row.getRow();
  }

  /** The message id (an unsigned u64) in decimal at the end of `digits`; its length. */
  private int decimal(long id) {
    if (id < 0) {
      byte[] text = Long.toUnsignedString(id).getBytes(StandardCharsets.US_ASCII);
      System.arraycopy(text, 0, digits, digits.length - text.length, text.length);
      return text.length;
    }
    int at = digits.length;
    do {
      digits[--at] = (byte) ('0' + id % 10);
      id /= 10;
    } while (id != 0);
    return digits.length - at;
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

  /** The headers as a map value: the size of the key array, the keys, the values. */
  private void writeHeaders(int ordinal, byte[] data, int message) {
    int pairs = PageRecords.u16(data, message + 28);
    int lengths = message + PageRecords.CODEC_HEAD;
    int textAt = lengths + 6 * pairs;
    UnsafeRowWriter row = writer;
    int previousCursor = row.cursor();
    row.grow(8);
    row.increaseCursor(8);
    int keysAt = row.cursor();
    keys.initialize(pairs);
    int pos = textAt;
    for (int i = 0; i < pairs; i++) {
      int key = PageRecords.u16(data, lengths + 6 * i);
      keys.write(i, data, pos, key);
      pos += key + (int) PageRecords.u32(data, lengths + 6 * i + 2);
    }
    Platform.putLong(row.getBuffer(), keysAt - 8, row.cursor() - keysAt);
    values.initialize(pairs);
    pos = textAt;
    for (int i = 0; i < pairs; i++) {
      int key = PageRecords.u16(data, lengths + 6 * i);
      int value = (int) PageRecords.u32(data, lengths + 6 * i + 2);
      values.write(i, data, pos + key, value);
      pos += key + value;
    }
    row.setOffsetAndSizeFromPreviousCursor(ordinal, previousCursor);
  }

  @Override
  public void close() {
  }
}
