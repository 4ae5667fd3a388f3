"""The pieces behind the operators' log lines: cleanup results in words, the JSON formatter,
peer addresses, log config files."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from pagemq.server.cleanup_report import describe_cleanup
from pagemq.server.connection_log import format_peer
from pagemq.server.log_setup import JsonFormatter, LogConfigError, read_log_config


def test_cleanup_results_read_as_words_and_leave_out_zeros():
    text = describe_cleanup({"deleted": 3, "archived": 0, "compacted_files": 1, "compacted_records": 1204,
                             "bytes_reclaimed": 96 << 20, "set_aside": 0, "errors": 0})
    assert text == "deleted 3 spent files, compacted 1 file (1,204 live records copied), reclaimed 96.0 MiB"
    assert describe_cleanup({"deleted": 0, "errors": 0}) == "nothing to do"
    assert "1 damaged file" in describe_cleanup({"set_aside": 1})
    assert "{" not in describe_cleanup({"errors": 2, "something_new": 5})


def test_json_formatter_gives_extra_fields_and_the_traceback():
    formatter = JsonFormatter()
    record = logging.LogRecord("pagemq.x", logging.WARNING, __file__, 1, "a %s\nline", ("two",), None)
    record.peer = "127.0.0.1:5"
    entry = json.loads(formatter.format(record))
    assert entry["message"] == "a two\nline" and entry["peer"] == "127.0.0.1:5"
    assert entry["level"] == "WARNING" and entry["logger"] == "pagemq.x"
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("pagemq", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = formatter.format(failed)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exception"]


def test_peers_are_host_colon_port_with_ipv6_in_brackets():
    assert format_peer(("10.0.0.1", 4242)) == "10.0.0.1:4242"
    assert format_peer(("::1", 4242, 0, 0)) == "[::1]:4242"
    assert format_peer(None) == "?"


def test_log_config_files_need_a_known_suffix_and_a_table(tmp_path):
    toml = tmp_path / "log.toml"
    toml.write_text('[root]\nlevel = "INFO"\n')
    expected = {"root": {"level": "INFO"}, "version": 1, "disable_existing_loggers": False}
    assert read_log_config(toml) == expected
    for name, text, problem in [("log.ini", "x", "unknown log config format"),
                                ("log.json", "[1]", "expected a dictConfig table"),
                                ("log.toml", "= x", "invalid TOML")]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(LogConfigError, match=problem):
            read_log_config(path)
