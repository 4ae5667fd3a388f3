"""The sink's STOMP sender against a peer that resets the connection after an ERROR."""

from __future__ import annotations

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
