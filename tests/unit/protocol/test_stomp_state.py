"""The connection state table, its rendering into docs/stomp.md, and the layer's purity."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pagemq.protocol.errors import RemoteProtocolError
from pagemq.protocol.stomp import events as ev
from pagemq.protocol.stomp.connection import StompConnection
from pagemq.protocol.stomp.frames import CLIENT_COMMANDS, SERVER_COMMANDS, encode_frame
from pagemq.protocol.stomp.state import (
    COMMAND_EVENTS,
    SECTIONS,
    TRANSITIONS,
    State,
    main,
    markers,
    render_into,
    render_markdown,
    unexpected_message,
)

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "stomp.md"

# The smallest valid frame for each client command, in 1.2.
MINIMAL = {
    "CONNECT": {"accept-version": "1.2"},
    "STOMP": {"accept-version": "1.2"},
    "SEND": {"destination": "/queue/a"},
    "SUBSCRIBE": {"id": "1", "destination": "/queue/a"},
    "UNSUBSCRIBE": {"id": "1"},
    "ACK": {"id": "1"},
    "NACK": {"id": "1"},
    "BEGIN": {"transaction": "t"},
    "COMMIT": {"transaction": "t"},
    "ABORT": {"transaction": "t"},
    "DISCONNECT": {},
}


def _in_state(state: State) -> StompConnection:
    connection = StompConnection()
    if state is State.AWAITING_CONNECT:
        return connection
    connection.receive_data(encode_frame("CONNECT", MINIMAL["CONNECT"]))
    if state is State.DISCONNECTED:
        connection.receive_data(encode_frame("DISCONNECT", {}))
    elif state is State.ERRORED:
        connection.error("failed")
    assert connection.state is state
    return connection


def test_every_client_command_has_an_event_type():
    assert set(COMMAND_EVENTS) == CLIENT_COMMANDS


def test_errored_is_terminal_and_has_no_transitions():
    assert not [pair for pair in TRANSITIONS if pair[0] is State.ERRORED]
    assert State.ERRORED not in TRANSITIONS.values()


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("command", sorted(CLIENT_COMMANDS | SERVER_COMMANDS))
def test_connection_follows_the_table_for_every_state_and_frame(state, command):
    connection = _in_state(state)
    target = TRANSITIONS.get((state, COMMAND_EVENTS.get(command)))  # type: ignore[arg-type]
    data = encode_frame(command, MINIMAL.get(command, {}))
    if target is None:
        with pytest.raises(RemoteProtocolError) as caught:
            connection.receive_data(data)
        if state is not State.ERRORED:
            assert caught.value.message == unexpected_message(state, command)
        assert connection.state is State.ERRORED
    else:
        (event,) = connection.receive_data(data)
        assert type(event) is COMMAND_EVENTS[command]
        assert connection.state is target


@pytest.mark.parametrize(
    ("state", "command", "message"),
    [
        (State.AWAITING_CONNECT, "SEND", "expected CONNECT or STOMP frame, got SEND"),
        (State.CONNECTED, "STOMP", "already connected: a second STOMP frame is not allowed"),
        (State.DISCONNECTED, "ACK", "got ACK after DISCONNECT"),
        (State.ERRORED, "ACK", "got ACK on a connection that has already failed"),
        (State.CONNECTED, "MESSAGE", "MESSAGE is a server frame; a client may not send it"),
    ],
)
def test_unexpected_messages_name_the_frame_and_the_problem(state, command, message):
    assert unexpected_message(state, command) == message


def test_rendered_table_has_a_row_per_event_and_a_column_per_state():
    table = render_markdown()
    header = "| frame (event) | AWAITING_CONNECT | CONNECTED | DISCONNECTED | ERRORED |"
    assert table.splitlines()[0] == header
    assert "| CONNECT, STOMP (`Connect`) | → CONNECTED | error | error | error |" in table
    assert "| DISCONNECT (`Disconnect`) | error | → DISCONNECTED | error | error |" in table
    assert len(table.splitlines()) == 2 + len(set(COMMAND_EVENTS.values())) + 1


def test_docs_stomp_md_holds_the_current_table():
    document = DOC.read_text(encoding="utf-8")
    assert render_into(document) == document, "run: python -m pagemq.protocol.stomp.state docs/stomp.md"


def test_main_rewrites_the_table_section_of_a_file(tmp_path, capsys):
    path = tmp_path / "doc.md"
    path.write_text(DOC.read_text(encoding="utf-8").replace("→ DISCONNECTED", "stale"), encoding="utf-8")
    main([str(path)])
    assert path.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")
    for section in SECTIONS:  # every table's section is rewritten, not only the first
        begin, _end = markers(section)
        stale = DOC.read_text(encoding="utf-8").replace(begin, f"{begin}\nstale")
        path.write_text(stale, encoding="utf-8")
        main([str(path)])
        assert path.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")
    main([])
    out = capsys.readouterr().out
    assert render_markdown() in out
    assert all(render() in out for render in SECTIONS.values())


def test_event_types_are_frozen():
    send = ev.Send("/queue/a", {}, b"", None, None)
    with pytest.raises(AttributeError):
        send.destination = "/queue/b"  # type: ignore[misc]


def test_protocol_layer_imports_no_io_or_broker_modules():
    """Habit 1: bytes in, events out; the layer never touches a socket or the broker."""
    forbidden = ("asyncio", "socket", "selectors", "pagemq.core", "pagemq.server", "pagemq.storage")
    for path in (ROOT / "pagemq" / "protocol").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert not name.startswith(forbidden), f"{path} imports {name}"
