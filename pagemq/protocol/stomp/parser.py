"""Bytes to STOMP frames over one receive buffer, with hard size limits; no I/O.

The parser is role-agnostic (the server and the perf client both use it) and works on a
`bytearray` with `bytes.find`, never byte by byte, because it sits on the broker's hot path:
at 40,000+ 1 KiB SEND frames/s it has a few microseconds per frame. Per complete frame it
does two `find`s for the end of the headers, one UTF-8 decode and one `split` of the header
block, a `partition` per header, and one slice for the body (content-length) or one `find`
for the NUL. Unescaping runs only when the header block contains a backslash.

A frame that has not fully arrived is kept as offsets into the buffer (`_Pending`, plus scan
positions), so feeding a frame one byte at a time costs linear, not quadratic, time: every
search resumes where the previous one stopped (the same idea as NATS' `parser.go` keeping
its state between reads, and h11's `ReceiveBuffer`).

Limits are enforced as soon as they are certain to be exceeded, never after buffering:
- a frame (command, headers and body: every byte before its NUL) over `max_frame_size`;
- more than `max_headers` header lines;
- a header line over `max_header_length` bytes (without its EOL);
- an unknown command, as soon as the first line is complete (random bytes fail fast).

Line endings: LF, or CR LF (STOMP 1.2) — accepted in every version, because the parser reads
a client's CONNECT before it knows which version that client speaks.
"""

from __future__ import annotations

from collections.abc import Mapping

from pagemq.protocol.errors import FrameError
from pagemq.protocol.stomp.frames import COMMANDS, UNESCAPED_COMMANDS, Frame, unescape

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_HEADERS",
    "DEFAULT_MAX_HEADER_LENGTH",
    "FrameParser",
]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
DEFAULT_MAX_HEADERS = 1000
DEFAULT_MAX_HEADER_LENGTH = 64 * 1024

# Longest command plus a CR: a longer unfinished first line cannot become a valid command.
_MAX_COMMAND_LINE = max(len(command) for command in COMMANDS) + 1
_LARGE_BODY = 64 * 1024  # a body this large is copied out of the buffer through a memoryview


def _shorten(text: str, limit: int = 60) -> str:
    """A repr short enough for an ERROR frame's message header."""
    shown = repr(text[:limit])
    return shown + "..." if len(text) > limit else shown


# The decoded head of a frame whose body has not fully arrived yet: (command, headers,
# offset of the body, content-length or -1 when the body ends at the first NUL). A tuple,
# not an object: one is made per frame.
_Pending = tuple[str, dict[str, str], int, int]


class FrameParser:
    """Incremental STOMP frame parser; `version` selects header unescaping (1.0: none).

    `feed(data)` returns every frame completed by `data`; if it raises, the frames completed
    before the bad one are on the error's `events`. Callers that must act on a frame before
    the next one is decoded (the server: a CONNECT changes `version` for the frames pipelined
    after it) use `append(data)` and `next_frame()` instead. After a `FrameError` the parser
    is spent: every later call raises a copy of that error.
    """

    __slots__ = (
        "_body_scan",
        "_buf",
        "_error",
        "_head_scan",
        "_line_scan",
        "_line_start",
        "_lines",
        "_pending",
        "heartbeats_received",
        "max_frame_size",
        "max_header_length",
        "max_headers",
        "version",
    )

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_headers: int = DEFAULT_MAX_HEADERS,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
    ) -> None:
        self.max_frame_size = max_frame_size
        self.max_headers = max_headers
        self.max_header_length = max_header_length
        self.version = "1.0"
        self.heartbeats_received = 0
        self._buf = bytearray()  # the current frame always starts at offset 0
        self._error: FrameError | None = None
        self._pending: _Pending | None = None
        self._reset_scans()

    def _reset_scans(self) -> None:
        self._head_scan = 0  # "\n\n" / "\n\r\n" do not start before this offset
        self._body_scan = 0  # no NUL before this offset (body without content-length)
        self._line_start = 0  # start of the first header line not yet checked
        self._line_scan = 0  # no LF between _line_start and this offset
        self._lines = 0  # lines checked so far (the command line included)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (bounded by max_frame_size + 1)."""
        return len(self._buf)

    @property
    def pending_send(self) -> Mapping[str, str] | None:
        """The headers of a SEND frame whose head is in and whose body is still coming (None
        otherwise): lets a server tell where a large frame goes before it is whole."""
        pending = self._pending
        if pending is None or pending[0] != "SEND":
            return None
        return pending[1]

    def feed(self, data: bytes) -> list[Frame]:
        """Append `data` and return every frame now complete, in order."""
        self.append(data)
        frames: list[Frame] = []
        next_frame = self._next_frame
        try:
            while (frame := next_frame()) is not None:
                frames.append(frame)
        except FrameError as exc:
            self._fail(exc)
            exc.events = frames
            raise
        return frames

    def append(self, data: bytes) -> None:
        if self._error is not None:
            raise self._failed()
        self._buf += data

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more data arrives."""
        if self._error is not None:
            raise self._failed()
        try:
            return self._next_frame()
        except FrameError as exc:
            self._fail(exc)
            raise

    def _failed(self) -> FrameError:
        """A fresh copy of the error that spent this parser (its `events` are not repeated)."""
        error = self._error
        assert error is not None
        return FrameError(error.message, receipt_id=error.receipt_id)

    def _fail(self, exc: FrameError) -> None:
        if exc.receipt_id is None and self._pending is None:  # the head did not parse
            exc.receipt_id = _receipt_line(self._buf, self.max_header_length, self.version)
        self._error = exc
        self._buf = bytearray()
        self._pending = None

    # -- one frame ------------------------------------------------------------------------

    def _next_frame(self) -> Frame | None:
        buf = self._buf
        pending = self._pending
        if pending is None:
            if not buf:
                return None
            first = buf[0]
            if (first == 10 or first == 13) and not self._skip_eols():
                return None
            pending = self._parse_head()
            if pending is None:
                return None
            self._pending = pending
        command, headers, start, length = pending
        if length >= 0:
            stop = start + length
            if len(buf) <= stop:
                return None
            if buf[stop] != 0:
                raise FrameError(
                    f"frame body is not followed by a NUL byte after content-length {length}",
                    receipt_id=headers.get("receipt"),
                )
        else:
            stop = buf.find(b"\x00", self._body_scan if self._body_scan > start else start)
            if stop < 0:
                if len(buf) > self.max_frame_size:
                    raise self._too_large(headers)
                self._body_scan = len(buf)
                return None
            if stop > self.max_frame_size:
                raise self._too_large(headers)
        if stop - start < _LARGE_BODY:
            body = bytes(buf[start:stop])
        else:  # one copy, not two (a slice of the buffer, then bytes of it): each a fresh megabyte
            with memoryview(buf) as view:
                body = bytes(view[start:stop])
        del buf[: stop + 1]
        self._pending = None
        self._reset_scans()
        return Frame(command, headers, body)

    def _skip_eols(self) -> bool:
        """Consume EOLs between frames (heart-beats); False if more bytes are needed."""
        buf = self._buf
        end = len(buf)
        index = 0
        beats = 0
        while index < end:
            byte = buf[index]
            if byte == 10:
                index += 1
            elif byte == 13 and index + 1 < end and buf[index + 1] == 10:
                index += 2
            else:
                break
            beats += 1
        if index:
            del buf[:index]
            self.heartbeats_received += beats
        return bool(buf) and not (len(buf) == 1 and buf[0] == 13)

    def _too_large(self, headers: dict[str, str] | None = None) -> FrameError:
        return FrameError(
            f"frame exceeds max-frame-size of {self.max_frame_size} bytes",
            receipt_id=headers.get("receipt") if headers else None,
        )

    # -- the head: command line and header lines ------------------------------------------

    def _parse_head(self) -> _Pending | None:
        buf = self._buf
        scan = self._head_scan
        end = buf.find(b"\n\n", scan)
        if end >= 0:
            # A CR LF head ends at "\n\r\n"; memchr for a CR first, as most heads have none.
            has_cr = buf.find(b"\r", 0, end) >= 0
            crlf = buf.find(b"\n\r\n", scan, end + 2) if has_cr else -1
        else:
            crlf = buf.find(b"\n\r\n", scan)
            has_cr = crlf >= 0
        if crlf >= 0 and (end < 0 or crlf < end):
            end, body_start = crlf, crlf + 3
        elif end >= 0:
            body_start = end + 2
        else:
            self._check_partial_head()
            return None
        if end > self.max_header_length:
            self._check_line_lengths(end)
        try:
            text = buf[:end].decode()
        except UnicodeDecodeError:
            raise FrameError("frame headers are not valid UTF-8") from None
        lines = text.split("\n")
        if has_cr:
            lines = [line[:-1] if line[-1:] == "\r" else line for line in lines]
        command = lines[0]
        if len(lines) > self.max_headers + 1:
            raise FrameError(f"frame has more than max-headers {self.max_headers} header lines")
        if "\\" in text and self.version != "1.0" and command not in UNESCAPED_COMMANDS:
            headers = self._escaped_headers(lines)
        else:
            headers = _plain_headers(lines)
        if command not in COMMANDS:
            raise FrameError(f"unknown command {_shorten(command)}", receipt_id=headers.get("receipt"))
        length_text = headers.get("content-length")
        if length_text is None:
            return command, headers, body_start, -1
        if len(length_text) < 16 and length_text.isdigit() and length_text.isascii():
            length = int(length_text)  # fast path: plainly a number, and no size limit near
            if body_start + length <= self.max_frame_size:
                return command, headers, body_start, length
        return command, headers, body_start, self._content_length(headers, body_start)

    def _escaped_headers(self, lines: list[str]) -> dict[str, str]:
        version = self.version
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise _no_colon(line)
            if "\\" in value:
                # Mostly `\c` alone (a colon in a URL, a time, an id): one replace. A backslash
                # left after it belongs to another sequence, which unescape sorts out.
                unescaped = value.replace("\\c", ":")
                value = unescape(value, version) if "\\" in unescaped else unescaped
            if "\\" in name:
                name = unescape(name, version)
            if name not in headers:
                headers[name] = value
        return headers

    def _content_length(self, headers: dict[str, str], body_start: int) -> int:
        text = headers["content-length"].strip(" \t")
        if not (text.isdigit() and text.isascii()):
            raise FrameError(
                f"content-length must be a non-negative integer, got {_shorten(headers['content-length'])}",
                receipt_id=headers.get("receipt"),
            )
        # int() refuses over 4,300 digits (CVE-2020-10735 guard); no frame is that long anyway.
        length = int(text) if len(text) < 100 else 10**100
        if length > self.max_frame_size:
            raise FrameError(
                f"content-length {text if len(text) <= 30 else text[:30] + '...'} exceeds max-frame-size "
                f"of {self.max_frame_size} bytes",
                receipt_id=headers.get("receipt"),
            )
        if body_start + length > self.max_frame_size:
            raise self._too_large(headers)
        return length

    def _check_line_lengths(self, end: int) -> None:
        """Exact per-line check, run only when the whole head is longer than one line may be."""
        limit = self.max_header_length
        for line in self._buf[:end].split(b"\n"):
            if len(line) > limit and (len(line) > limit + 1 or not line.endswith(b"\r")):
                raise self._line_too_long()

    def _line_too_long(self) -> FrameError:
        return FrameError(f"header line exceeds max-header-length of {self.max_header_length} bytes")

    def _check_partial_head(self) -> None:
        """Fail an unfinished head as soon as it is sure to break a limit; resume next time."""
        buf = self._buf
        size = len(buf)
        if size > self.max_frame_size:
            raise self._too_large()
        limit = self.max_header_length
        start = self._line_start
        lines = self._lines
        newline = buf.find(b"\n", self._line_scan if self._line_scan > start else start)
        while newline >= 0:
            stop = newline - 1 if newline > start and buf[newline - 1] == 13 else newline
            if lines == 0:
                command = buf[start:stop].decode("utf-8", "replace")
                if command not in COMMANDS:
                    raise FrameError(f"unknown command {_shorten(command)}")
            elif stop - start > limit:
                raise self._line_too_long()
            lines += 1
            if lines > self.max_headers + 1:
                raise FrameError(f"frame has more than max-headers {self.max_headers} header lines")
            start = newline + 1
            newline = buf.find(b"\n", start)
        if lines == 0 and size - start > _MAX_COMMAND_LINE:
            command = buf[:_MAX_COMMAND_LINE].decode("utf-8", "replace")
            raise FrameError(f"unknown command {_shorten(command)}")
        if size - start > limit + 1:
            raise self._line_too_long()
        self._line_start = start
        self._line_scan = size
        self._lines = lines
        self._head_scan = size - 2 if size > 2 else 0


def _plain_headers(lines: list[str]) -> dict[str, str]:
    """Header lines after the command, nothing to unescape; the first of a repeat wins."""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise _no_colon(line)
        if name not in headers:
            headers[name] = value
    return headers


def _receipt_line(buf: bytearray, limit: int, version: str) -> str | None:
    """The `receipt` a frame whose head failed to parse asked for, read from its raw head
    (the buffer starts at that frame's command), so its ERROR can still name it (STOMP
    1.2: an ERROR carries the receipt-id of the frame it answers), unescaped as the frame's
    headers would have been. None when there is no such line within the head, or it is
    longer than a header line may be."""
    ends = [at for at in (buf.find(b"\n\n"), buf.find(b"\n\r\n")) if at >= 0]
    head = bytes(buf[:min(ends) + 1 if ends else len(buf)])
    lines = head.split(b"\n")
    for line in lines[1:]:
        if line.startswith(b"receipt:"):
            value = line[len(b"receipt:"):].removesuffix(b"\r")
            if len(value) > limit:
                return None
            text = value.decode("utf-8", "replace")
            command = lines[0].removesuffix(b"\r").decode("utf-8", "replace")
            if "\\" not in text or version == "1.0" or command in UNESCAPED_COMMANDS:
                return text
            try:
                return unescape(text, version)
            except FrameError:
                return None  # its own escapes are bad: no receipt to name
    return None


def _no_colon(line: str) -> FrameError:
    return FrameError(f"header line without a colon: {_shorten(line)}")
