"""The sink's Arrow-encoded SEND frames (`pagemq.spark.send_frames`) against the protocol's
own encoder and parser: what the broker reads must be what `encode_frame` would have sent
for the same row (escapes, null values and the sink's own headers left out, repeated
headers, empty and binary bodies, sliced batches). No Spark, no broker."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.events import SendBatch
from pagemq.protocol.stomp.frames import encode_frame
from pagemq.protocol.stomp.parser import FrameParser
from pagemq.spark.send_frames import (
    OWN_HEADERS,
    SendTemplate,
    batch_headers,
    body_column,
    encode_batch_send,
    encode_sends,
    split_rows,
)

HEADERS = pa.map_(pa.string(), pa.string())
Maps = list[list[tuple[str, str | None]] | None]
AWKWARD = ["a", "b:c", "line\nbreak", "back\\slash", "cr\rhere", "é€", "persistent", *OWN_HEADERS, ""]


def parsed(data: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    parser = FrameParser()
    parser.version = "1.2"
    parser.append(data)
    frames = []
    while parser.buffered and (frame := parser.next_frame()) is not None:
        headers = dict(frame.headers)
        headers.pop("content-length", None)
        frames.append((frame.command, headers, frame.body))
    return frames


def reference(template: SendTemplate, bodies: list[bytes | None], maps: Maps, first_row: int,
              transaction: str | None) -> bytes:
    """What the row-by-row sink sends for these rows (`encode_frame`)."""
    frames = []
    for n, (body, pairs) in enumerate(zip(bodies, maps, strict=True)):
        own = [(k, v) for k, v in pairs or [] if v is not None and k not in OWN_HEADERS]
        headers = [("destination", template.destination),
                   *([("transaction", transaction)] if transaction is not None else []), *own,
                   *([("persistent", "true")] if template.persistent else []),
                   ("_AMQ_DUPL_ID", f"{template.duplicate_prefix}{first_row + n}")]
        frames.append(encode_frame("SEND", headers, body or b""))
    return b"".join(frames)


def random_rows(rng: random.Random, count: int) -> tuple[list[bytes | None], Maps]:
    bodies: list[bytes | None] = [rng.choice([None, b"", b"\x00", rng.randbytes(rng.randint(0, 300))])
                                  for _ in range(count)]
    maps: Maps = []
    for _ in range(count):
        if rng.random() < 0.2:
            maps.append(None)
            continue
        keys = rng.sample(AWKWARD, rng.randint(0, 5))
        maps.append([(key, rng.choice([None, "", "v", "x:y\nz\\w\r", "ü"])) for key in keys])
    return bodies, maps


def random_batch(seed: int) -> tuple[list[bytes | None], Maps, pa.RecordBatch]:
    """60 random rows (`random_rows`), also as the record batch the sink is given."""
    bodies, maps = random_rows(random.Random(seed), 60)
    batch = pa.RecordBatch.from_pydict({"body": pa.array(bodies, pa.binary()),
                                        "headers": pa.array(maps, HEADERS)})
    return bodies, maps, batch


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("persistent", [True, False])
def test_frames_read_back_as_the_protocol_encoder_writes_them(seed, persistent):
    bodies, maps, batch = random_batch(seed)
    template = SendTemplate("/queue/odd:name\\x", persistent=persistent, duplicate_prefix="spark:job:1:3:")
    for start, stop, transaction in [(0, 60, "t1"), (7, 30, None), (59, 60, "tx:2")]:
        sliced = batch.slice(start, stop - start)
        sent = encode_sends(template, body_column(sliced), sliced.column("headers"), 100 + start, transaction)
        expected = reference(template, bodies[start:stop], maps[start:stop], 100 + start, transaction)
        assert parsed(sent) == parsed(expected)
        assert len(parsed(sent)) == stop - start


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("persistent", [True, False])
def test_a_batch_send_holds_the_messages_the_plain_sends_would(seed, persistent):
    bodies, maps, batch = random_batch(seed)
    template = SendTemplate("/queue/odd:name\\x", persistent=persistent, duplicate_prefix="spark:j\\b:1:3:")
    own = batch_headers(template, batch.column("headers"), 100, 60)
    for start, stop in [(0, 60), (7, 30), (59, 60)]:
        sent = encode_batch_send(template, body_column(batch).slice(start, stop - start),
                                 own.slice(start, stop - start), "tx:2")
        expected = parsed(reference(template, bodies[start:stop], maps[start:stop], 100 + start, "tx:2"))
        assert decoded(sent) == [(headers, body) for _command, headers, body in expected]


def decoded(batch_send: bytes) -> list[tuple[dict[str, str], bytes]]:
    """The messages a broker takes from a batch SEND, with their `transaction` as a plain
    SEND's headers have it."""
    connection = StompConnection()
    connection.receive_data(encode_frame("CONNECT", [("accept-version", "1.2"), ("host", "h")]))
    (event,) = connection.receive_data(batch_send)
    assert isinstance(event, SendBatch)
    return [({**headers, "transaction": event.transaction}, body) for headers, body in event.messages]


def test_string_bodies_go_as_utf8_and_without_a_headers_column():
    batch = pa.RecordBatch.from_pydict({"body": pa.array(["hé", None, "x\x00y"])})
    template = SendTemplate("/topic/t", persistent=True, duplicate_prefix="p:")
    frames = parsed(encode_sends(template, body_column(batch), None, 0, None))
    assert [body for _, _, body in frames] == ["hé".encode(), b"", b"x\x00y"]
    assert [headers["_AMQ_DUPL_ID"] for _, headers, _ in frames] == ["p:0", "p:1", "p:2"]
    assert all(headers["persistent"] == "true" for _, headers, _ in frames)


def test_a_rows_own_persistent_header_comes_first_and_wins():
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"a"]),
                                        "headers": pa.array([[("persistent", "false")]], HEADERS)})
    sent = encode_sends(SendTemplate("/queue/q", persistent=True, duplicate_prefix="p:"), body_column(batch),
                        batch.column("headers"), 0, None)
    assert sent.index(b"persistent:false") < sent.index(b"persistent:true")
    assert parsed(sent)[0][1]["persistent"] == "false"


def test_rows_split_into_transactions_by_count_and_bytes():
    assert split_rows([10] * 7, 3, 1000) == [(0, 3), (3, 6), (6, 7)]
    assert split_rows([400, 400, 400, 5000, 1], 10, 1000) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert split_rows([], 3, 10) == []
