"""Operations features attacked as a user would (issue 18): what broke, kept as tests.

Each test here failed against the first merge of the management API, the metrics and the
logs; they start a real broker and talk to it over HTTP and STOMP."""

from __future__ import annotations

from admin_http import call, path_of
from brokerproc import unique


def test_a_move_body_that_is_not_utf8_is_a_400_not_a_500(broker, stomp_client):
    name = unique("badbody")
    client = stomp_client(broker)
    client.send(f"/queue/{name}", "kept", receipt=True)

    status, answer, _ = call(broker, "POST", path_of("queues", name, "move"), raw=b"\xff\xfe{")

    assert status == 400, answer
    assert "JSON" in answer["error"]
    assert broker.queue(name)["messages"] == 1
