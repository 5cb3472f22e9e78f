"""``xrmq chat --private-stack``: a line typed on stdin is answered; /quit stops the stack it started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from buses import expect_line, processes_mentioning, reap

pytestmark = pytest.mark.timeout(60)


def test_chat_answers_a_typed_line_from_the_participants_context_and_quits(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "XRMQ_RUNTIME_DIR": str(tmp_path), "XRMQ_LOG_LEVEL": "WARNING"}
    chat = subprocess.Popen([sys.executable, "-m", "xrmq.actors.cli", "chat", "--private-stack", "--participant", "ann"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        expect_line(chat, "xrmq chat: ready participant=ann bus=ipc://")
        chat.stdin.write("My locker is number 318.\n")
        chat.stdin.flush()
        expect_line(chat, "conversation: ")
        chat.stdin.write("Which number is my locker?\n")
        chat.stdin.flush()
        answer = expect_line(chat, "conversation: ")
        chat.stdin.write("/quit\n")
        chat.stdin.flush()
        assert chat.wait(timeout=30) == 0, chat.stderr.read()[-3000:]
    finally:
        reap(chat)
    assert answer == "conversation: From what I have: My locker is number 318."
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_the_former_flag_name_embedded_still_selects_a_private_stack():
    from xrmq.actors.cli import build_parser

    for flag in ("--private-stack", "--embedded"):
        assert build_parser().parse_args(["chat", flag]).private_stack is True
    assert build_parser().parse_args(["chat"]).private_stack is False
