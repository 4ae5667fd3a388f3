"""The sink's STOMP sender against a peer that resets the connection after an ERROR."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

import pytest

from pagemq.spark.stomp_sender import StompSender, StompSendError


def test_a_write_failing_after_the_broker_reset_still_reports_the_error_it_sent() -> None:
    """A broker closing with our SENDs unread resets the connection; the ERROR it sent before
    is still in our socket and names the cause (not just "connection reset")."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"CONNECTED\nversion:1.2\n\n\x00")
        time.sleep(0.2)
        conn.sendall(b"ERROR\nmessage:address 'q' is full\n\n\x00")
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    sender = StompSender("127.0.0.1", port, window=10**9, timeout=5).connect()
    time.sleep(0.5)
    frame = b"SEND\ndestination:/queue/q\n\n" + b"x" * 1000 + b"\x00"
    with pytest.raises(StompSendError, match="broker ERROR: address 'q' is full"):
        for _ in range(100_000):
            sender._write(frame)
    sender.close()
    server.close()


class RecordingPeer:
    """A STOMP peer that is not pagemq: CONNECTED without `pagemq-batch`, a RECEIPT for every
    frame asking for one, and every frame it got kept (the protocol's own parser)."""

    def __init__(self) -> None:
        from pagemq.protocol.stomp.parser import FrameParser

        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.frames: list = []
        self.connect_headers: dict[str, str] = {}
        self._parser = FrameParser()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.server:
            conn, _ = self.server.accept()
        with conn, contextlib.suppress(OSError):  # the sender may close with a reset
            while data := conn.recv(65536):
                self._parser.append(data)
                while self._parser.buffered and (frame := self._parser.next_frame()) is not None:
                    if frame.command == "CONNECT":
                        self.connect_headers = dict(frame.headers)
                        self._parser.version = "1.2"
                        conn.sendall(b"CONNECTED\nversion:1.2\n\n\x00")
                        continue
                    self.frames.append(frame)
                    if (receipt := frame.headers.get("receipt")) is not None:
                        conn.sendall(b"RECEIPT\nreceipt-id:" + receipt.encode() + b"\n\n\x00")


def test_to_a_broker_that_does_not_offer_batches_the_sink_sends_a_frame_per_row() -> None:
    import pyarrow as pa

    from pagemq.spark.sink import SinkOptions, send_partition

    peer = RecordingPeer()
    options = SinkOptions("127.0.0.1", peer.port, "/queue/q", None, None, persistent=True, window=100,
                          timeout=5, job_id=None, has_headers=False, transaction_size=10)
    rows = pa.RecordBatch.from_pydict({"body": pa.array([f"row{n}".encode() for n in range(25)])})
    sent = send_partition(options, iter([rows]), "job", 7)
    assert sent.rows == 25
    assert peer.connect_headers["pagemq-batch"] == "1"  # asked for, and not offered
    sends = [frame for frame in peer.frames if frame.command == "SEND"]
    assert [frame.body for frame in sends] == [f"row{n}".encode() for n in range(25)]
    assert all("pagemq-batch" not in frame.headers for frame in sends)
    assert sends[3].headers["_AMQ_DUPL_ID"] == "spark:job:7:0:3"
    assert [frame.command for frame in peer.frames].count("COMMIT") == 3  # transactions of 10
