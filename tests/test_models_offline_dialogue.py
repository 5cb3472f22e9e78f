"""The offline model in the demo's dialogue talks sensibly (issue 17, item 10).

Each participant's turns run against the prompt the conversation builds (system prompt,
the rendered context blocks with the current-time line last, the request), and every
completed exchange joins the context as the context manager renders it, so each answer
here is what the demo prints.
"""

from __future__ import annotations

import pytest

from xrmq.actors.context.render import exchange_text, state_text, update_text
from xrmq.actors.conversation import answer_messages, default_system_prompt
from xrmq.actors.models import ChatRequest, OfflineLLM
from xrmq.actors.models.extractive import GREETING_ANSWER, NO_MATCH_ANSWER, reply
from xrmq.schemas import ContextBlock

NOW_US = (
    1_796_123_000_000_000  # 2026-12-01 11:03:20 UTC: its day (01) and month (12) must never match
)


class Participant:
    """One participant's context as the conversation sees it, and the offline model's answers."""

    def __init__(self) -> None:
        self.blocks: list[ContextBlock] = []
        self.clock = NOW_US
        self.llm = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)

    def tick(self) -> int:
        self.clock += 1_000_000
        return self.clock

    def sense(self, topic: str, text: str, *, state: bool = False) -> None:
        render = state_text if state else update_text
        now = self.tick()
        self.blocks.append(ContextBlock(now, render(topic, text, now)))

    def say(self, text: str) -> str:
        now = self.tick()
        messages = answer_messages(default_system_prompt(), self.blocks, now, text)
        answer = self.llm.respond(ChatRequest(tuple(messages)))
        self.blocks.append(ContextBlock(now, exchange_text(text, answer, now)))
        return answer


def test_the_demo_dialogue_of_alice_reads_as_a_plausible_conversation():
    alice = Participant()
    alice.sense("scene", "Alice is at the workbench in lab 3 with the oscilloscope on.", state=True)
    alice.sense("notes", "The kettle in lab 3 is set to 85 degrees.")
    assert alice.say("I left the spare key in drawer 12 of the blue cabinet.") == (
        "Noted: you left the spare key in drawer 12 of the blue cabinet."
    )
    assert (
        alice.say("What temperature is the kettle set to?")
        == "The kettle in lab 3 is set to 85 degrees."
    )
    alice.sense("notes", "The fire drill starts at 14:30 today, assemble at gate B.")
    assert (
        alice.say("When does the fire drill start?")
        == "The fire drill starts at 14:30 today, assemble at gate B."
    )
    assert (
        alice.say("Where did I leave the spare key?")
        == "You left the spare key in drawer 12 of the blue cabinet."
    )
    assert (
        alice.say("Which drawer holds the spare key?")
        == "You left the spare key in drawer 12 of the blue cabinet."
    )


def test_the_demo_dialogue_of_bob_acknowledges_then_recalls_in_the_second_person():
    bob = Participant()
    bob.sense("scene", "Bob is at the loading dock next to pallet P-12.", state=True)
    assert (
        bob.say("My badge number is 4471, please remember it.")
        == "Noted: your badge number is 4471."
    )
    assert bob.say("What is my badge number?") == "Your badge number is 4471."
    assert bob.say("Which pallet is next to me at the loading dock?") == (
        "Bob is at the loading dock next to pallet P-12."
    )


def test_a_number_inside_a_date_or_the_clock_line_is_never_a_match():
    ann = Participant()
    # "12" and "01" appear in every timestamp and in the current-time line (2026-12-01).
    assert ann.say("Is drawer 12 open?") == NO_MATCH_ANSWER
    assert ann.say("What happened on the 01?") == NO_MATCH_ANSWER


def test_the_users_earlier_question_is_never_quoted_as_a_fact():
    ann = Participant()
    assert ann.say("When is the meeting?") == NO_MATCH_ANSWER
    assert ann.say("Actually the meeting moved to 16:00.") == "Noted: the meeting moved to 16:00."
    assert ann.say("When is the meeting?") == "The meeting moved to 16:00."


def test_a_greeting_is_greeted_and_thanks_are_acknowledged():
    ann = Participant()
    assert ann.say("Hello!") == GREETING_ANSWER
    assert (
        ann.say("Good morning, my locker is number 318.")
        == "Hello! Noted: your locker is number 318."
    )
    assert ann.say("Hi, which number is my locker?") == "Hello! Your locker is number 318."
    assert ann.say("Thanks!") == "You're welcome."


def test_it_says_plainly_when_it_does_not_know():
    ann = Participant()
    ann.sense("notes", "The kettle in lab 3 is set to 85 degrees.")
    assert (
        ann.say("What is the weather in Paris?")
        == NO_MATCH_ANSWER
        == "I have nothing about that in what I was given."
    )


def test_a_dialogue_summary_keeps_the_users_fact_not_a_bad_answer():
    """What the demo's compaction keeps of a dialogue (rendered exchanges) still answers right."""
    summary = (
        "Summary of earlier conversation: [2026-12-01 12:32:56 UTC] User: I left the spare key "
        "in drawer 12 of the blue cabinet.\n"
        "Assistant: Noted: you left the spare key in drawer 12 of the blue cabinet.\n"
        "[2026-12-01 12:32:57 UTC] User: What temperature is the kettle set to?"
    )
    context = [*summary.splitlines(), "Current time: 2026-12-01 12:40:00 UTC"]
    assert (
        reply("Where is the spare key?", context)
        == "You left the spare key in drawer 12 of the blue cabinet."
    )
    assert reply("What is the kettle set to?", context) == NO_MATCH_ANSWER


def test_the_time_is_told_from_the_clock_line():
    assert (
        reply("What time is it?", ["Current time: 2026-12-01 12:40:00 UTC"])
        == "It is 2026-12-01 12:40:00 UTC."
    )


@pytest.mark.parametrize(
    "question",
    ["What time is it?", "what's the time", "What is the date today?", "What day is it?"],
)
def test_a_question_about_now_is_told_from_the_clock_line(question):
    assert reply(question, ["Current time: 2026-12-01 12:40:00 UTC"]).startswith(
        "It is 2026-12-01 12:40:00 UTC"
    )


def test_the_time_of_something_is_answered_from_the_context_never_from_the_clock():
    clock = "Current time: 2026-12-01 12:40:00 UTC"
    yoga = "[2026-12-01 09:00:00 UTC] User: My yoga class is at 18:15 in studio 3."
    assert reply("What time is my yoga class?", [yoga, clock]) == (
        "Your yoga class is at 18:15 in studio 3."
    )
    assert reply("What time is my yoga class?", [clock]) == NO_MATCH_ANSWER
    assert reply("What day is the fire drill?", [clock]) == NO_MATCH_ANSWER
