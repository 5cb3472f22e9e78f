"""Command-line arguments are checked as they are parsed, the error naming the argument and
the rule, exit 2 (issue 29, item 11): a timeout is a finite number of seconds > 0, a topic
or a participant is a non-empty name, text is UTF-8."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from xrmq.actors import cli

pytestmark = pytest.mark.timeout(60)
CLI = [sys.executable, "-m", "xrmq.actors.cli"]


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The error line argparse prints for ``argv``, which must exit 2."""
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_say_timeout_nan_is_refused_naming_the_argument_without_a_warning():
    result = subprocess.run(
        [*CLI, "say", "--timeout", "nan", "hi"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "xrmq say: error: argument --timeout: must be a finite number of seconds > 0, got 'nan'"
    )
    assert "Warning" not in result.stderr and "cannot convert" not in result.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "soon"])
@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["say", "hi"], "--timeout"),
        (["chat"], "--timeout"),
        (["context", "dump"], "--timeout"),
        (["record", "out.cap"], "--duration"),
        (["topics"], "--window"),
        (["top"], "--interval"),
        (["top", "--once"], "--window"),
        (["listen"], "--idle-timeout"),
    ],
)
def test_every_duration_argument_must_be_a_finite_number_of_seconds_above_zero(
    argv, argument, value, capsys
):
    line = refusal([*argv, f"{argument}={value}"], capsys)  # "=": "-inf" is not an option
    assert line.endswith(
        f"error: argument {argument}: must be a finite number of seconds > 0, got {value!r}"
    )


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["echo", ""], "topic"),
        (["publish", "", "Kettle on."], "topic"),
        (["record", "out.cap", "--topic", ""], "--topic"),
        (["replay", "in.cap", "--only", ""], "--only"),
        (["replay", "in.cap", "--exclude", ""], "--exclude"),
        (["listen", "--topic", ""], "--topic"),
        (["say", "--participant", "", "hi"], "--participant"),
        (["echo", "notes", "--participant", ""], "--participant"),
        (["context", "clear", "--participant", ""], "--participant"),
        (["mic", "--participant", ""], "--participant"),
    ],
)
def test_topic_and_participant_arguments_must_be_non_empty(argv, argument, capsys):
    line = refusal(argv, capsys)
    assert line.endswith(f"error: argument {argument}: must be a non-empty name without NUL")


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["say", "caf\udce9"], "text"),
        (["publish", "notes", "caf\udce9"], "content"),
        (["echo", "caf\udce9"], "topic"),
        (["say", "--participant", "caf\udce9", "hi"], "--participant"),
    ],
)
def test_text_that_is_not_utf8_is_refused_naming_the_argument_and_the_byte(argv, argument, capsys):
    line = refusal(argv, capsys)  # "\udce9": how Python keeps the argv byte 0xe9 it cannot decode
    assert line.endswith(
        f"error: argument {argument}: must be UTF-8 text: the byte 0xe9 at position 3 is not UTF-8"
    )


def test_say_with_a_latin1_argv_is_refused_naming_the_text_argument():
    result = subprocess.run(
        [*CLI, "say", os.fsencode("caf\udce9")],  # b"caf\xe9": Latin-1, as a non-UTF-8 shell sends
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "xrmq say: error: argument text: must be UTF-8 text: the byte 0xe9 at position 3 is "
        "not UTF-8"
    )


def test_say_text_must_not_be_blank(capsys):
    assert refusal(["say", "  "], capsys).endswith("error: argument text: must be non-empty text")
