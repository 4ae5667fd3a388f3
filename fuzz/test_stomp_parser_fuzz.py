"""Hypothesis fuzzing of the STOMP frame parser from the seed corpus in fuzz/corpus/.

    .venv/bin/pytest fuzz                       # about 10 s
    PAGEMQ_FUZZ_EXAMPLES=20000 .venv/bin/pytest fuzz   # a longer campaign

Inputs are seeds mutated by flips, inserts of STOMP-significant tokens, deletions,
duplications and splices with other seeds, then cut into random reads. Properties:

1. The parser returns frames or raises `FrameError`, nothing else, and never holds more
   than `max_frame_size + 1` bytes of an unfinished frame.
2. How the input is cut does not matter: the same frames, and an error either way or neither.
3. Every frame it returns respects the limits and its own content-length.
4. A returned frame, encoded again, parses back to itself (content-length aside).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagemq.protocol.errors import FrameError
from pagemq.protocol.stomp.frames import COMMANDS, Frame, encode_frame
from pagemq.protocol.stomp.parser import FrameParser

CORPUS = sorted((Path(__file__).parent / "corpus").glob("*.stomp"))
SEEDS = [path.read_bytes() for path in CORPUS]
EXAMPLES = int(os.environ.get("PAGEMQ_FUZZ_EXAMPLES", "1500"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENS = [b"\n", b"\r\n", b"\n\n", b"\x00", b":", b"\\", b"\\c", b"\\n", b"\\r", b"\\t", b"\r",
          b"content-length:", b"content-length:0\n", b"content-length:99999999\n", b"receipt:r\n",
          b"SEND\n", b"MESSAGE\n", b"CONNECT\n", b"\xff", b"\xc3", b"9", b"-"]

# Small limits make the limit checks reachable from short seeds; the defaults are fuzzed too.
LIMITS = st.sampled_from([
    {"max_frame_size": 256, "max_headers": 4, "max_header_length": 32},
    {"max_frame_size": 1024, "max_headers": 16, "max_header_length": 128},
    {},
])


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "splice"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.sampled_from(TOKENS) | st.binary(max_size=4))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 40))]
        elif op == "splice":
            other = draw(st.sampled_from(SEEDS))
            data[at:] = other[draw(st.integers(0, len(other))) :]
    return bytes(data)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


_Outcome = tuple[list[Frame], FrameError | None]


def _run(data_chunks: list[bytes], version: str, limits: dict[str, int]) -> _Outcome:
    parser = FrameParser(**limits)
    parser.version = version
    bound = parser.max_frame_size + 1
    frames: list[Frame] = []
    try:
        for chunk in data_chunks:
            frames.extend(parser.feed(chunk))
            assert parser.buffered <= bound, f"holds {parser.buffered} bytes, bound {bound}"
    except FrameError as exc:
        frames.extend(exc.events)
        assert parser.buffered == 0
        with pytest.raises(FrameError):
            parser.feed(b"\n")
        return frames, exc
    return frames, None


def _check_frame(frame: Frame, limits: dict[str, int]) -> None:
    parser = FrameParser(**limits)
    assert frame.command in COMMANDS
    assert isinstance(frame.body, bytes)
    assert len(frame.headers) <= parser.max_headers
    assert len(frame.body) <= parser.max_frame_size
    length = frame.headers.get("content-length")
    if length is not None:
        assert len(frame.body) == int(length)
    else:
        assert b"\x00" not in frame.body


def _without_length(frame: Frame) -> Frame:
    headers = {k: v for k, v in frame.headers.items() if k != "content-length"}
    return Frame(frame.command, headers, frame.body)


def _reencodes(frame: Frame, version: str) -> None:
    headers = [(k, v) for k, v in frame.headers.items() if k != "content-length"]
    data = encode_frame(frame.command, headers, frame.body, version=version)
    parser = FrameParser()
    parser.version = version
    (again,) = parser.feed(data)
    assert _without_length(again) == _without_length(frame)


def test_corpus_is_present():
    assert len(SEEDS) >= 10


@FUZZ
@given(data=mutated(), cuts=st.lists(st.integers(min_value=0), max_size=6),
       version=st.sampled_from(["1.0", "1.1", "1.2"]), limits=LIMITS)
def test_mutated_input_parses_the_same_however_it_is_cut(data, cuts, version, limits):
    whole, whole_error = _run([data], version, limits)
    pieces, pieces_error = _run(_cut(data, cuts), version, limits)
    assert pieces == whole
    assert (pieces_error is None) == (whole_error is None), (whole_error, pieces_error)
    for frame in whole:
        _check_frame(frame, limits)
        if version == "1.2" or "\r" not in "".join(frame.headers.values()):
            _reencodes(frame, version)


@FUZZ
@given(data=mutated(), version=st.sampled_from(["1.0", "1.2"]))
def test_mutated_input_fed_byte_by_byte_matches_whole(data, version):
    whole, whole_error = _run([data], version, {})
    single, single_error = _run([data[i : i + 1] for i in range(len(data))], version, {})
    assert single == whole
    assert (single_error is None) == (whole_error is None)


@FUZZ
@given(data=st.binary(max_size=2048), limits=LIMITS)
def test_random_bytes_never_crash_the_parser(data, limits):
    frames, _ = _run([data], "1.2", limits)
    for frame in frames:
        _check_frame(frame, limits)
