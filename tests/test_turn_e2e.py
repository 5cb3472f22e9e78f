"""The turn path end to end across separate OS processes.

Processes: the broker; the router (with a remote proxy for the conversation); the
conversation with its ContextManager replica (OfflineLLM answers from context); the
context sections with a compaction worker; the voice renderer with a recording sink;
a sensor publishing a context topic; a text input publishing UserQuery. Every wait is
on a line a process prints; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from buses import broker_process, expect_line, python, reap

pytestmark = pytest.mark.timeout(120)

TOPIC = "sample.monitor"
FACT = "Reactor R7 pressure reads 4.2 bar."
SECOND_FACT = (
    "Coolant flow in loop B of reactor R7 is 35 liters per minute, the bypass valve V3 is half "
    "open, "
    "and the pressure trend is rising slowly since the morning shift change."
)
ENV = {**os.environ, "XRMQ_LOG_LEVEL": "WARNING"}


class Voice:
    """Reads the voice process's JSON reports and keeps every response's segments and end."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.responses: dict[int, dict] = {}

    def read_until(self, predicate) -> None:
        assert self.proc.stdout is not None  # started with stdout a pipe
        while not predicate(self):
            line = self.proc.stdout.readline()
            if not line:
                stderr = self.proc.stderr.read()[-3000:] if self.proc.stderr else "(not captured)"
                raise AssertionError(f"voice process exited: {stderr}")
            report = json.loads(line)
            response = self.responses.setdefault(
                report["response"],
                {
                    "participant": report["participant"],
                    "texts": [],
                    "sources": None,
                    "request": None,
                    "reason": None,
                },
            )
            if report["event"] == "segment":
                response["texts"].append(report["text"])
                response["sources"], response["request"] = report["sources"], report["request"]
            else:
                response["reason"] = report["reason"]

    def of(self, participant: str) -> list[dict]:
        return [r for _, r in sorted(self.responses.items()) if r["participant"] == participant]

    def ended(self, participant: str, count: int) -> bool:
        return sum(1 for r in self.of(participant) if r["reason"] is not None) >= count

    @staticmethod
    def text(response: dict) -> str:
        return " ".join(response["texts"])


def send(proc: subprocess.Popen, command: str) -> str:
    assert proc.stdin is not None  # started with a pipe
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return expect_line(proc, "sent ").split(" ", 1)[1]


def dialogue_until(proc: subprocess.Popen, participant: str, request: str) -> list[str]:
    """Read the conversation process's reports until the participant's dialogue holds
    ``request``."""
    while True:
        requests = json.loads(expect_line(proc, f"dialogue {participant} ").split(" ", 2)[2])
        if request in requests:
            return requests


def publish_fact(bus: str, participant: str, text: str) -> None:
    sensor = python("turn_sensor.py", bus, TOPIC, participant, text, env=ENV)
    try:
        expect_line(sensor, "published")
        assert sensor.wait(timeout=30) == 0
    finally:
        reap(sensor)


def test_two_participants_get_their_own_context_and_an_interruption_cuts_the_reply():
    with broker_process() as bus:
        procs = [
            python("turn_context.py", bus, TOPIC, env=ENV),
            python("turn_conversation.py", bus, TOPIC, env=ENV),
            python("turn_router.py", bus, env=ENV),
            python("turn_voice.py", bus, env=ENV),
            python("turn_input.py", bus, stdin=subprocess.PIPE, env=ENV),
        ]
        _context, conversation, _router, voice_proc, text_input = procs
        try:
            for proc in procs:
                expect_line(proc, "ready")
            voice = Voice(voice_proc)

            publish_fact(bus, "p1", FACT)
            expect_line(conversation, "context p1 1")  # the fact reached the conversation's context

            # Two participants ask the same question at once.
            first_p1 = send(text_input, "query p1 What does the reactor pressure read?")
            first_p2 = send(text_input, "query p2 What does the reactor pressure read?")
            voice.read_until(lambda v: v.ended("p1", 1) and v.ended("p2", 1))
            (p1_answer,), (p2_answer,) = voice.of("p1"), voice.of("p2")
            assert (p1_answer["reason"], p2_answer["reason"]) == ("completed", "completed")
            assert (p1_answer["request"], p2_answer["request"]) == (first_p1, first_p2)
            assert p1_answer["sources"] == p2_answer["sources"] == ["conversation"]
            assert "4.2 bar" in Voice.text(p1_answer)
            assert "4.2" not in Voice.text(p2_answer) and "R7" not in Voice.text(p2_answer)

            # A long answer is interrupted mid-way; the next turn is answered.
            publish_fact(bus, "p1", SECOND_FACT)
            expect_line(conversation, "context p1 2")
            send(
                text_input,
                "query p1 Tell me about the coolant flow, the bypass valve and the pressure trend",
            )
            voice.read_until(lambda v: len(v.of("p1")) == 2 and v.of("p1")[1]["texts"])
            send(text_input, "interrupt p1")
            voice.read_until(lambda v: v.ended("p1", 2))
            cut = voice.of("p1")[1]
            assert cut["reason"] == "interrupted"
            assert "since the morning shift change" not in Voice.text(cut)
            last = send(text_input, "query p1 What does the R7 pressure read in bar now?")
            voice.read_until(lambda v: v.ended("p1", 3))
            answered = voice.of("p1")[2]
            assert (answered["reason"], answered["request"]) == ("completed", last)
            assert "4.2 bar" in Voice.text(answered)
            assert not voice.of("p2")[1:]  # p2 heard nothing of p1's conversation
            # the interrupted answer was never recorded; the answered ones were
            assert dialogue_until(
                conversation, "p1", "What does the R7 pressure read in bar now?"
            ) == [
                "What does the reactor pressure read?",
                "What does the R7 pressure read in bar now?",
            ]
        finally:
            text_input.stdin.close()
            reap(*procs)
