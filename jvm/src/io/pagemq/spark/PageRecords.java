package io.pagemq.spark;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.zip.CRC32;

/**
 * The records of one page file, found by walking its frames (docs/formats/page.md): where
 * each kept entry starts and its ordinal.
 *
 * <p>{@link #read} returns null unless the whole file is what this reader knows: a format-2
 * page whose every frame is intact (magic, length, ordinal not below the expected one, CRC,
 * a body of MESSAGE, BATCH or TX_BATCH entries adding up to it exactly) up to the planned
 * size, and whose every kept message decodes (codec version 1, lengths adding up, header
 * text UTF-8 when headers are read). The Python reader handles the rest, damage included.
 */
final class PageRecords {

  static final int FILE_HEADER = 24;
  static final int FRAME_HEADER = 16;
  static final int ENTRY_HEAD = 15; // flags u8, message id u64, queue count u16, message length u32
  static final int CODEC_HEAD = 38;
  private static final int MESSAGE = 1;
  private static final int BATCH = 2;
  private static final int TX_BATCH = 3;

  final byte[] data;
  final int[] entryAt; // offset of each kept entry (its flags byte)
  final int[] messageAt; // offset of each kept entry's encoded message
  final int[] ordinal;
  final int count;

  private PageRecords(byte[] data, int[] entryAt, int[] messageAt, int[] ordinal, int count) {
    this.data = data;
    this.entryAt = entryAt;
    this.messageAt = messageAt;
    this.ordinal = ordinal;
    this.count = count;
  }

  /** The file's records, or null for the Python reader (see the class doc). */
  static PageRecords read(PageTask task) throws IOException {
    Path path = Path.of(task.path);
    if (!Files.exists(path)) {
      return null; // archived or deleted since planning: Python looks further and reports
    }
    if (task.limit > Integer.MAX_VALUE - 8) {
      return null;
    }
    byte[] data = new byte[(int) task.limit];
    try (RandomAccessFile file = new RandomAccessFile(path.toFile(), "r")) {
      if (file.length() < task.limit) {
        return null;
      }
      file.readFully(data);
    }
    return walk(data, task);
  }

  static PageRecords walk(byte[] data, PageTask task) {
    int end = data.length;
    if (end < FILE_HEADER || !fileHeaderOk(data, task.pageNo)) {
      return null;
    }
    Walk walk = new Walk(Math.max(16, end / 1024));
    CRC32 crc = new CRC32();
    int pos = FILE_HEADER;
    long expected = 0;
    while (pos < end) {
      if (pos + FRAME_HEADER > end || u32(data, pos) != 0x46514d50L) { // "PMQF"
        return null;
      }
      long length = u32(data, pos + 8);
      long first = u32(data, pos + 12);
      if (length <= 0 || length >= (1L << 31) || pos + FRAME_HEADER + length > end || first < expected) {
        return null;
      }
      int stop = (int) (pos + FRAME_HEADER + length);
      crc.reset();
      crc.update(data, pos + 8, stop - pos - 8);
      if (crc.getValue() != u32(data, pos + 4)) {
        return null;
      }
      long entries = walk.body(data, pos + FRAME_HEADER, stop, first, task);
      if (entries <= 0) {
        return null;
      }
      expected = first + entries;
      pos = stop;
    }
    return new PageRecords(data, walk.entryAt, walk.messageAt, walk.ordinal, walk.count);
  }

  private static boolean fileHeaderOk(byte[] data, long pageNo) {
    CRC32 crc = new CRC32();
    crc.update(data, 0, 20);
    return data[0] == 'P' && data[1] == 'M' && data[2] == 'Q' && data[3] == 'P'
        && u16(data, 4) == 2 && u16(data, 6) == FILE_HEADER && u64(data, 8) == pageNo
        && crc.getValue() == u32(data, 20);
  }

  /** The records kept so far, growing. */
  private static final class Walk {
    int[] entryAt;
    int[] messageAt;
    int[] ordinal;
    int count;

    Walk(int capacity) {
      entryAt = new int[capacity];
      messageAt = new int[capacity];
      ordinal = new int[capacity];
    }

    /** Entries in the frame body [at, stop), the kept ones noted; -1 if it is not intact. */
    long body(byte[] data, int at, int stop, long first, PageTask task) {
      int kind = data[at] & 0xff;
      long entries;
      int pos;
      boolean keep = true;
      if (kind == MESSAGE) {
        entries = 1;
        pos = at + 1;
      } else if (kind == BATCH && at + 5 <= stop) {
        entries = u32(data, at + 1);
        pos = at + 5;
      } else if (kind == TX_BATCH && at + 13 <= stop) {
        long txid = u64(data, at + 1);
        if (txid == 0) {
          return -1;
        }
        keep = task.committed(txid);
        entries = u32(data, at + 9);
        pos = at + 13;
      } else {
        return -1;
      }
      for (long i = 0; i < entries; i++) {
        if (pos + ENTRY_HEAD > stop) {
          return -1;
        }
        int queues = u16(data, pos + 9);
        long messageLength = u32(data, pos + 11);
        long message = pos + ENTRY_HEAD + 8L * queues;
        if (message + messageLength > stop) {
          return -1;
        }
        if (keep) {
          if (first + i > Integer.MAX_VALUE || !decodes(data, (int) message, (int) messageLength,
              task.includeHeaders)) {
            return -1;
          }
          add(pos, (int) message, (int) (first + i));
        }
        pos = (int) (message + messageLength);
      }
      return pos == stop ? entries : -1;
    }

    private void add(int entry, int message, int ord) {
      if (count == entryAt.length) {
        int capacity = count * 2;
        entryAt = Arrays.copyOf(entryAt, capacity);
        messageAt = Arrays.copyOf(messageAt, capacity);
        ordinal = Arrays.copyOf(ordinal, capacity);
      }
      entryAt[count] = entry;
      messageAt[count] = message;
      ordinal[count] = ord;
      count++;
    }
  }

  /** As message_codec.read_head (and decode_headers, when headers are read) would accept it. */
  static boolean decodes(byte[] data, int at, int length, boolean headers) {
    if (length < CODEC_HEAD || data[at] != 1) {
      return false;
    }
    int pairs = u16(data, at + 28);
    long text = u32(data, at + 30);
    long body = u32(data, at + 34);
    if (CODEC_HEAD + 6L * pairs + text + body != length) {
      return false;
    }
    long sum = 0;
    int lengths = at + CODEC_HEAD;
    for (int i = 0; i < pairs; i++) {
      sum += u16(data, lengths + 6 * i) + u32(data, lengths + 6 * i + 2);
    }
    if (sum != text) {
      return false;
    }
    return !headers || utf8(data, lengths + 6 * pairs, (int) text, lengths, pairs);
  }

  /** Header text that is ASCII, or each key and value valid UTF-8 on its own. */
  private static boolean utf8(byte[] data, int at, int length, int lengths, int pairs) {
    for (int i = at; i < at + length; i++) {
      if (data[i] < 0) {
        return everyTokenUtf8(data, at, lengths, pairs);
      }
    }
    return true;
  }

  private static boolean everyTokenUtf8(byte[] data, int at, int lengths, int pairs) {
    CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
        .onMalformedInput(CodingErrorAction.REPORT)
        .onUnmappableCharacter(CodingErrorAction.REPORT);
    int pos = at;
    for (int i = 0; i < 2 * pairs; i++) {
      int size = (i % 2 == 0) ? u16(data, lengths + 6 * (i / 2)) : (int) u32(data, lengths + 6 * (i / 2) + 2);
      try {
        decoder.reset().decode(ByteBuffer.wrap(data, pos, size));
      } catch (CharacterCodingException e) {
        return false;
      }
      pos += size;
    }
    return true;
  }

  static int u16(byte[] b, int at) {
    return (b[at] & 0xff) | (b[at + 1] & 0xff) << 8;
  }

  static long u32(byte[] b, int at) {
    return (b[at] & 0xffL) | (b[at + 1] & 0xffL) << 8 | (b[at + 2] & 0xffL) << 16 | (b[at + 3] & 0xffL) << 24;
  }

  static long u64(byte[] b, int at) {
    return u32(b, at) | u32(b, at + 4) << 32;
  }
}
