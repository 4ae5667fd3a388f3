"""Batch SEND: many messages in one STOMP SEND frame (a pagemq extension).

Parsing a STOMP frame costs the broker more per message than storing it: finding the head,
splitting and unescaping its lines, the content-length, an event. A producer that sends
thousands of small messages in one transaction (the Spark sink) pays that once per batch
instead: a SEND with the header `pagemq-batch:1` carries the messages in its body, each with
its own headers and body, and stands for as many SEND frames in a row, all in the frame's
transaction (docs/stomp.md, "Batch SEND").

A client asks for the extension in CONNECT (`pagemq-batch:1`); a pagemq broker answers in
CONNECTED with `pagemq-batch:1` and its `pagemq-max-frame-size`, another broker answers
without them, and the client then sends plain SENDs. The body's layout (version 1,
little-endian):

    u32             n, the number of messages
    n x u32         each message's header text length, in bytes
    n x u32         each message's body length
    header texts    each message's own headers, one after the other: zero or more lines
                    `name:value\\n`, UTF-8, with STOMP 1.2's escapes
    bodies          each message's body, one after the other

Lengths first, then every header text, then every body: the broker reads all lengths with
one call and decodes all header text at once, and an Arrow client writes the bodies as its
column's value buffer, unchanged.

A message's headers are the frame's (but `pagemq-batch`, `receipt`, `transaction` and
`content-length`) with its own on top: its own `persistent` beats the frame's. It may not
set `destination`, `receipt`, `transaction`, `content-length` or `pagemq-batch`.

Sans-IO: bytes in, fields out; `encode_batch` is the reference encoder (tests, Python
clients), `pagemq.spark.send_frames` the column-wise one.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence

from pagemq.protocol.errors import FrameError
from pagemq.protocol.stomp.events import Send, SendBatch
from pagemq.protocol.stomp.frames import encode_frame, escape, unescape

__all__ = ["BATCH_HEADER", "BATCH_VERSION", "MAX_FRAME_SIZE_HEADER", "batch_overhead",
           "decode_batch", "encode_batch", "encode_batch_body", "escape_value"]

BATCH_HEADER = "pagemq-batch"
BATCH_VERSION = "1"
MAX_FRAME_SIZE_HEADER = "pagemq-max-frame-size"
# Headers a message of a batch may not set: the frame's alone decide them.
_FRAME_ONLY = frozenset({"destination", "receipt", "transaction", "content-length", BATCH_HEADER})
_LITTLE = sys.byteorder == "little"


def batch_overhead(count: int) -> int:
    """The bytes a batch body adds to its messages' header texts and bodies."""
    return 4 + 8 * count


def decode_batch(send: Send, *, max_headers: int, max_header_length: int) -> SendBatch:
    """The batch a SEND frame with `pagemq-batch` carries (`send` as parsed: this takes its
    header dict over); FrameError saying what is wrong with the frame as a whole. Its
    messages are decoded as they are taken from `SendBatch.messages` (which raises
    FrameError for a bad one), so that a receiver can first weigh the batch by its lengths
    (`header_count`, `header_text`, `body_bytes`): a frame of millions of empty messages
    would take many times its size once decoded. The limits are those of a frame's head,
    applied to each message's headers."""
    headers, body, receipt, transaction = send.headers, send.body, send.receipt, send.transaction
    version = headers.pop(BATCH_HEADER)

    def refuse(problem: str) -> FrameError:
        return FrameError(f"batch SEND: {problem}", receipt_id=receipt)

    if version != BATCH_VERSION:
        raise refuse(f"unknown {BATCH_HEADER} version {version!r} (this broker reads {BATCH_VERSION})")
    if not transaction:
        raise refuse("a batch goes in a transaction: no transaction header (BEGIN one, SEND the batch "
                     "in it, COMMIT)")
    size = len(body)
    if size < 4:
        raise refuse(f"body of {size} bytes is shorter than its message count")
    count = int.from_bytes(body[:4], "little")
    text_at = batch_overhead(count)
    if text_at > size:
        raise refuse(f"body of {size} bytes cannot hold the lengths of {count} messages")
    lengths = array("I")
    lengths.frombytes(body[4:text_at])
    if not _LITTLE:
        lengths.byteswap()
    text_lengths, body_lengths = lengths[:count], lengths[count:]
    body_at = text_at + sum(text_lengths)
    if body_at + sum(body_lengths) != size:
        raise refuse(f"lengths describe {body_at + sum(body_lengths)} bytes, the body has {size}")
    try:
        text = body[text_at:body_at].decode("utf-8")  # strict, as a frame's head: no lone surrogates
    except UnicodeDecodeError as exc:
        raise refuse(f"message headers are not UTF-8: {exc}") from None
    common_text = sum(map(len, headers)) + sum(map(len, headers.values()))
    messages = _messages(headers, body, text, text_lengths, body_lengths, text_at, body_at, refuse,
                         max_headers, max_header_length)
    return SendBatch(send.destination, transaction, messages, receipt, size, count,
                     count * len(headers) + text.count("\n"), count * common_text + body_at - text_at,
                     size - body_at)


def _messages(headers: dict[str, str], body: bytes, text: str, text_lengths: array[int],
              body_lengths: array[int], text_at: int, body_at: int, refuse: Callable[[str], FrameError],
              max_headers: int, max_header_length: int) -> Iterator[tuple[dict[str, str], bytes]]:
    """Each message of a batch whose lengths add up: its complete headers and its body.
    `text` is the header texts (`body[text_at:body_at]`) decoded."""
    ascii_text = len(text) == body_at - text_at
    raw = b"" if ascii_text else body[text_at:body_at]
    room = max_headers - len(headers)
    at = 0  # in `text`: characters when ASCII, else bytes of `raw`
    pos = body_at
    for index, length in enumerate(text_lengths):
        if ascii_text:
            own_text = text[at:at + length]
        else:
            try:
                own_text = raw[at:at + length].decode("utf-8")
            except UnicodeDecodeError:
                raise refuse(f"message {index}'s header text ends inside a UTF-8 sequence") from None
        at += length
        end = pos + body_lengths[index]
        if not own_text:
            yield headers.copy(), body[pos:end]
        elif (ascii_text and own_text.find("\n") == length - 1 and "\\" not in own_text
              and length <= max_header_length and room > 0):
            # One plain line (the Spark sink's `_AMQ_DUPL_ID`): the general path's checks, inline.
            name, colon, value = own_text.partition(":")
            if not colon or name in _FRAME_ONLY:
                _own_headers(own_text, index, refuse, max_header_length)  # raises, saying why
            message = headers.copy()
            message[name] = value[:-1]
            yield message, body[pos:end]
        else:
            own = _own_headers(own_text, index, refuse, max_header_length)
            if len(own) > room:
                raise refuse(f"message {index} has more than max-headers {max_headers} headers, "
                             "the frame's included")
            yield {**headers, **own}, body[pos:end]
        pos = end


def _own_headers(text: str, index: int, refuse: Callable[[str], FrameError], limit: int) -> dict[str, str]:
    """A message's own header lines (each ends with a line feed); the first of a repeat wins."""
    if text[-1] != "\n":
        raise refuse(f"message {index}'s header text does not end with a line feed")
    own: dict[str, str] = {}
    for line in text[:-1].split("\n"):
        name, colon, value = line.partition(":")
        if not colon:
            raise refuse(f"message {index}: header line without a colon: {line[:60]!r}")
        if len(line) > limit or (len(line) * 4 > limit and len(line.encode("utf-8")) > limit):
            raise refuse(f"message {index}: header line exceeds max-header-length of {limit} bytes")
        if "\\" in line:
            try:
                name, value = unescape(name, "1.2"), unescape(value, "1.2")
            except FrameError as exc:
                raise refuse(f"message {index}: {exc.message}") from None
        if name in _FRAME_ONLY:
            raise refuse(f"message {index} sets {name!r}, which only the frame's headers may")
        if name not in own:
            own[name] = value
    return own


def escape_value(value: str) -> str:
    """A header value escaped for a message's own header lines: STOMP 1.2's escapes but for
    the colon, which a value may hold as it is (the line splits at its first colon), so the
    broker has nothing to unescape in the common case (ids, URLs, times)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def encode_batch_body(messages: Sequence[tuple[Sequence[tuple[str, str]], bytes]]) -> bytes:
    """The body of a batch SEND of `messages`, each (its own headers, its body)."""
    texts = [b"".join(f"{escape(name, '1.2')}:{escape_value(value)}\n".encode()  # no lone surrogates
                      for name, value in own) for own, _body in messages]
    lengths = array("I", [len(text) for text in texts] + [len(body) for _own, body in messages])
    if not _LITTLE:
        lengths.byteswap()
    return b"".join((len(messages).to_bytes(4, "little"), lengths.tobytes(), *texts,
                     *(body for _own, body in messages)))


def encode_batch(destination: str, transaction: str,
                 messages: Sequence[tuple[Sequence[tuple[str, str]], bytes]],
                 headers: Mapping[str, str] | None = None, receipt: str | None = None) -> bytes:
    """A whole batch SEND frame: `headers` are those every message shares."""
    head = [("destination", destination), ("transaction", transaction), (BATCH_HEADER, BATCH_VERSION),
            *(headers or {}).items()]
    if receipt is not None:
        head.append(("receipt", receipt))
    return encode_frame("SEND", head, encode_batch_body(messages))
