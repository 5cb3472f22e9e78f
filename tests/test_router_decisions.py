"""Decision services: single destination, keyword rules, and a model's constrained choice."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from xrmq.actors.models import ModelError, ScriptedLLM, ScriptedResponse
from xrmq.actors.routing import KeywordDecisions, LLMDecisions, SingleDestination
from xrmq.actors.routing.decisions import keyword_choice, parse_choice
from xrmq.actors.routing.state import candidates
from xrmq.schemas import AgentTurn, RoutingAid

TURN = AgentTurn("p1", "t1", "What is on the bench in front of me?")
AIDS = {
    "chat": RoutingAid("General conversation"),
    "camera": RoutingAid(
        "Answers questions about what the participant sees",
        keywords=("in front of me", "see", "bench"),
    ),
    "notes": RoutingAid("Takes and reads notes", keywords=("note", "notes")),
}


async def test_single_destination_picks_its_destination_while_it_is_a_candidate():
    assert await SingleDestination("camera").decide(TURN, AIDS) == "camera"
    assert await SingleDestination("camera").decide(TURN, {"chat": AIDS["chat"]}) is None


async def test_single_destination_without_a_name_picks_the_highest_priority_then_the_first():
    assert await SingleDestination().decide(TURN, AIDS) == "chat"
    ranked = {**AIDS, "notes": RoutingAid("notes", priority=3)}
    assert await SingleDestination().decide(TURN, ranked) == "notes"
    assert await SingleDestination().decide(TURN, {}) is None


def test_candidates_are_the_eligible_destinations_not_excluded_in_order():
    aids = {**AIDS, "notes": RoutingAid("notes", eligible=False)}
    assert list(candidates(aids)) == ["chat", "camera"]
    assert list(candidates(aids, {"chat"})) == ["camera"]


def test_keywords_match_whole_words_and_phrases_case_insensitively():
    assert keyword_choice("Take a NOTE please", AIDS) == "notes"
    assert keyword_choice("What's in   front of me?", AIDS) == "camera"
    assert keyword_choice("I noted that", AIDS) is None  # "note" is not a whole word here
    assert keyword_choice("Hello there", AIDS) is None


def test_keyword_choice_prefers_more_matches_then_priority():
    # bench + see vs notes
    assert keyword_choice("Read my notes about the bench I see", AIDS) == "camera"
    tied = {
        "a": RoutingAid("a", keywords=("x",)),
        "b": RoutingAid("b", priority=1, keywords=("x",)),
    }
    assert keyword_choice("x", tied) == "b"


async def test_keyword_decisions_choose_from_routing_aid_keywords():
    assert await KeywordDecisions().decide(TURN, AIDS) == "camera"
    assert await KeywordDecisions().decide(AgentTurn("p1", "t2", "Tell me a joke"), AIDS) is None


@pytest.mark.parametrize(
    ("answer", "choice"),
    [
        ("camera", "camera"),
        ("  Camera.\n", "camera"),
        ('"notes"', "notes"),
        ("**chat**", "chat"),
        ("none", None),
        ("None.", None),
    ],
)
def test_parse_choice_accepts_a_bare_name_or_none(answer, choice):
    assert parse_choice(answer, list(AIDS)) == choice


@pytest.mark.parametrize("answer", ["I think camera", "camera, notes", "printer", ""])
def test_parse_choice_rejects_anything_else(answer):
    with pytest.raises(ValueError, match="names no destination"):
        parse_choice(answer, list(AIDS))


async def test_llm_decisions_ask_for_a_constrained_choice_with_thinking_off():
    llm = ScriptedLLM("camera")
    assert await LLMDecisions(llm).decide(TURN, AIDS) == "camera"
    request = llm.requests[0]
    assert request.options.thinking is False and request.options.temperature == 0
    system, user = request.messages
    assert "- camera: Answers questions about what the participant sees" in system.content
    assert "reply with none" in system.content.lower()
    assert user.content == TURN.text


@pytest.mark.parametrize(
    "response",
    [
        ScriptedResponse("I would send this to the camera."),
        ScriptedResponse("printer"),
        ScriptedResponse(error=ModelError("scripted", "unavailable")),
        ScriptedResponse("camera", finish_reason="length"),
    ],
)
async def test_llm_decisions_fall_back_to_the_default_on_a_malformed_or_failed_answer(response):
    with capture_logs() as logs:
        assert await LLMDecisions(ScriptedLLM(response)).decide(TURN, AIDS) is None
    assert [entry["event"] for entry in logs] == ["router.decision_failed"]


async def test_llm_decisions_with_one_candidate_choose_it_without_a_model_call():
    llm = ScriptedLLM()
    assert await LLMDecisions(llm).decide(TURN, {"chat": AIDS["chat"]}) == "chat"
    assert llm.requests == []
