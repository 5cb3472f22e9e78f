"""The command line's rough edges, smoothed (issue 17, item 7)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from xrmq.actors import cli
from xrmq.actors.edge.config_loader import default_config
from xrmq.actors.edge.supervisor import Supervisor

from buses import broker_process

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
ROOT = Path(__file__).resolve().parent.parent


def xrmq(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_version_prints_the_package_version():
    result = xrmq("--version")
    assert (
        result.returncode == 0
        and result.stdout.strip() == f"xrmq {cli.version()}" != "xrmq unknown"
    )


def test_every_command_takes_q_and_v_and_the_level_follows_flags_then_environment():
    parser = cli.build_parser()
    [commands] = [action.choices for action in parser._actions if action.dest == "command"]
    assert {
        "up",
        "say",
        "publish",
        "top",
        "chat",
        "record",
        "replay",
        "listen",
        "bus",
        "demo",
    } <= set(commands)
    for name, command in commands.items():
        options = {option for action in command._actions for option in action.option_strings}
        assert {"-q", "-v"} <= options, name
    assert (
        parser.parse_args(["say", "-q", "hi"]).quiet
        and parser.parse_args(["up", "-vv"]).verbosity == 2
    )
    assert cli.log_level("say", False, 0, {}) == "WARNING"  # one-shot commands are quiet by default
    assert cli.log_level("up", False, 0, {}) == "INFO"
    assert cli.log_level("say", False, 0, {"XRMQ_LOG_LEVEL": "debug"}) == "DEBUG"
    assert cli.log_level("up", True, 0, {"XRMQ_LOG_LEVEL": "DEBUG"}) == "ERROR"
    assert (
        cli.log_level("say", False, 1, {}) == "INFO"
        and cli.log_level("say", False, 2, {}) == "DEBUG"
    )


def test_one_shot_commands_print_no_lifecycle_log_lines(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "XRMQ_LOG_LEVEL"}
    with broker_process() as bus:
        result = subprocess.run(
            [*CLI, "publish", "--bus", bus, "notes", "--participant", "p1", "Kettle on."],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no JSON lifecycle lines


def test_without_a_broker_commands_fail_at_once_naming_xrmq_up(tmp_path, capsys):
    bus = f"ipc://{tmp_path}/bus"
    for argv in (
        ["say", "--bus", bus, "hi"],
        ["publish", "--bus", bus, "notes", "--participant", "p1", "x"],
        ["top", "--bus", bus, "--once"],
        ["chat", "--bus", bus],
        ["record", "--bus", bus, "f.rec"],
    ):
        began = time.monotonic()
        assert cli.main(argv) == 2
        assert time.monotonic() - began < 1
        error = capsys.readouterr().err
        assert f"no broker serves bus {bus!r}" in error and "`xrmq up`" in error, error


def test_publish_prints_what_it_published_and_warns_on_an_unknown_topic_and_a_missing_participant():
    with broker_process() as bus:
        good = xrmq("publish", "--bus", bus, "notes", "--participant", "p1", "Kettle on.")
        typo = xrmq("publish", "--bus", bus, "note", "Kettle on.")
    assert good.returncode == 0 and good.stderr == ""
    assert good.stdout.startswith("xrmq publish: notes participant=p1 message_id=")
    assert typo.returncode == 0 and typo.stdout.startswith(
        "xrmq publish: note participant=- message_id="
    )
    warnings = typo.stderr.splitlines()
    assert warnings == [
        "xrmq publish: warning: 'note' is neither a standard topic nor a context topic of the "
        "default config (scene, notes): only a box configured with it reads it",
        "xrmq publish: warning: no --participant: 'note' is participant-scoped, so no "
        "participant's context or turn receives a global message",
    ]


def test_record_and_replay_report_a_missing_file_without_a_traceback(tmp_path):
    replayed = xrmq("replay", "--bus", f"ipc://{tmp_path}/bus", str(tmp_path / "missing.rec"))
    assert replayed.returncode == 2
    assert replayed.stderr.strip() == (
        f"xrmq replay: {tmp_path / 'missing.rec'}: no such recording "
        "(make one with `xrmq record FILE`)"
    )
    with broker_process() as bus:
        recorded = xrmq("record", "--bus", bus, "--count", "1", str(tmp_path / "no" / "dir.rec"))
    assert recorded.returncode == 2
    assert (
        recorded.stderr.strip()
        == f"xrmq record: {tmp_path / 'no' / 'dir.rec'}: No such file or directory"
    )


def test_bench_names_an_unknown_suite_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bench", "nosuch", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("python -m bench: no suite 'nosuch' (known: ")
    )
    assert "Traceback" not in result.stderr


def test_up_on_a_terminal_makes_its_processes_log_human_lines(monkeypatch):
    monkeypatch.delenv("XRMQ_LOG_FORMAT", raising=False)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert (
        Supervisor(default_config(), None, out=Terminal())._child_env()["XRMQ_LOG_FORMAT"]
        == "console"
    )
    # a pipe: JSON
    assert Supervisor(default_config(), None, out=io.StringIO())._child_env() is None


def test_the_log_format_can_be_chosen_by_environment():
    code = "from xrmq.actors.runtime import get_logger; get_logger(actor='t').warning('hello')"
    lines = {}
    for chosen in ("json", "console"):
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "XRMQ_LOG_FORMAT": chosen, "XRMQ_LOG_LEVEL": "INFO"},
        )
        lines[chosen] = result.stderr.strip()
    assert json.loads(lines["json"])["event"] == "hello"
    assert "hello" in lines["console"] and not lines["console"].startswith("{")
