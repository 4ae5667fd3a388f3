"""`pagemq --version`, `pagemq data print --config` (custom journal and paging directories),
and `pagemq data print` piped into `head` ending quietly."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from brokerproc import PAGEMQ, cli_into_head, run_cli


def test_version_is_the_installed_package_version():
    for command in ([PAGEMQ, "--version"], [sys.executable, "-m", "pagemq", "--version"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"pagemq {version('pagemq')}"


def test_data_print_finds_custom_directories_through_the_config_file(start_broker, stomp_client):
    config = {
        "broker": {"data-directory": "data", "journal-directory": "elsewhere/jrnl",
                   "paging-directory": "elsewhere/pages"},
        "address-settings": {"zero.#": {"max-size-bytes": 0}},
    }
    proc = start_broker(config)
    producer = stomp_client(proc)
    for n in range(3):
        producer.send("/queue/kept", f"k{n}", headers={"persistent": "true"}, receipt=True)
        producer.send("/queue/zero.paged", f"p{n}", headers={"persistent": "true"}, receipt=True)
    producer.disconnect()
    proc.stop()
    assert (proc.workdir / "elsewhere" / "pages").is_dir() and (proc.workdir / "elsewhere" / "jrnl").is_dir()

    result = run_cli("data", "print", "--config", str(proc.config_path), cwd=proc.workdir)
    assert result.returncode == 0, result.stderr
    assert "elsewhere/jrnl" in result.stdout and "elsewhere/pages" in result.stdout, result.stdout
    assert "queue 'kept'" in result.stdout and "3 in the journal" in result.stdout, result.stdout
    assert "queue 'zero.paged'" in result.stdout and "3 paged" in result.stdout, result.stdout

    blind = run_cli("data", "print", "--data-dir", str(proc.data_dir))  # without the config file
    assert "queue 'kept'" not in blind.stdout, blind.stdout

    checked = run_cli("data", "check", "--config", str(proc.config_path), cwd=proc.workdir)
    assert checked.returncode == 0 and "sound" in checked.stdout, checked.stdout + checked.stderr


def test_data_print_with_a_bad_config_file_is_one_line_exit_2(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[broker]\npaging-directroy = "x"\n')
    result = run_cli("data", "print", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "paging-directroy" in result.stderr, result.stderr


def test_data_print_piped_into_head_ends_quietly(start_broker, stomp_client):
    proc = start_broker()
    producer = stomp_client(proc)
    for n in range(1500):  # some 150 KB of --records output: more than a pipe holds
        producer.send("/queue/many", f"message {n}", headers={"persistent": "true"}, receipt=n % 100 == 99)
    producer.disconnect()
    proc.stop()
    first, code, stderr = cli_into_head("data", "print", "--records", "--data-dir", str(proc.data_dir))
    assert first.startswith(b"data directory")
    assert code == 0, stderr
    assert stderr == "", stderr
