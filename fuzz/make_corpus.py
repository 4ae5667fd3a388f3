"""Write the seed corpus for the STOMP parser fuzz test: `python fuzz/make_corpus.py`.

Each seed is one file of raw bytes as a client or server could send them: every version,
both body framings, escapes, CR LF endings, heart-beats, pipelined frames, and some that are
wrong on purpose (the mutations start from both kinds). The files are committed; this script
documents where they came from and regenerates them.
"""

from __future__ import annotations

from pathlib import Path

SEEDS: dict[str, bytes] = {
    "connect-1.0": b"CONNECT\nlogin:guest\npasscode:guest\n\n\x00",
    "stomp-1.2-crlf": b"STOMP\r\naccept-version:1.0,1.1,1.2\r\nhost:localhost\r\n"
                      b"heart-beat:1000,0\r\n\r\n\x00",
    "send-content-length-nul-body": b"SEND\ndestination:/queue/a\ncontent-length:8\nreceipt:r1\n\n"
                                    b"a\x00b\n\n\x00c\x00\x00",
    "send-nul-terminated": b"SEND\ndestination:/queue/a\npersistent:true\npriority:9\n\nhello world\x00\n",
    "send-escaped-1.2": b"SEND\ndestination:/queue/a\nk\\cey:a\\cb\\nc\\\\d\\re\n\nx\x00",
    "send-transaction": b"BEGIN\ntransaction:t1\n\n\x00SEND\ndestination:/queue/a\ntransaction:t1\n\n1\x00"
                        b"COMMIT\ntransaction:t1\nreceipt:c\n\n\x00",
    "subscribe-ack-nack": b"SUBSCRIBE\nid:0\ndestination:/topic/t\nack:client-individual\n"
                          b"selector:a = 'b'\n\n\x00"
                          b"ACK\nid:0.1\n\n\x00NACK\nid:0.2\n\n\x00UNSUBSCRIBE\nid:0\n\n\x00",
    "heartbeats": b"\n\n\r\n\nDISCONNECT\nreceipt:bye\n\n\x00\n\r\n",
    "repeated-headers": b"MESSAGE\nfoo:World\nfoo:Hello\nsubscription:0\nmessage-id:1\n"
                        b"destination:/queue/a\n\n\x00",
    "server-frames": b"CONNECTED\nversion:1.2\nsession:s\nheart-beat:0,0\n\n\x00"
                     b"RECEIPT\nreceipt-id:r\\c1\n\n\x00"
                     b"ERROR\nmessage:bad\ncontent-type:text/plain\ncontent-length:4\n\nbad\n\x00",
    "utf8-headers": "SEND\ndestination:/queue/caf\u00e9\nnote:\u2713 ok\n\n\u00e9\x00".encode(),
    "empty-and-nameless": b"SEND\nempty:\n:nameless\ncontent-length:0\n\n\x00",
    "big-body": b"SEND\ndestination:/queue/big\ncontent-length:600\n\n"
                + bytes(range(256)) * 2 + b"z" * 88 + b"\x00",
    "bad-no-colon": b"SEND\ndestination:/q\nno colon here\n\nx\x00",
    "bad-content-length": b"SEND\ncontent-length:4x\n\nbody\x00",
    "bad-short-content-length": b"SEND\ncontent-length:3\n\nbody\x00",
    "bad-escape": b"SEND\nnote:a\\tb\n\nx\x00",
    "bad-command": b"FROBNICATE\nreceipt:r\n\n\x00",
    "http-request": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
}


def main() -> None:
    corpus = Path(__file__).parent / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, data in SEEDS.items():
        (corpus / f"{name}.stomp").write_bytes(data)


if __name__ == "__main__":
    main()
