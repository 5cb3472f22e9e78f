"""Decision services: which destination should take a turn nobody holds focus for.

A decision service sees the turn and the *candidates* (eligible destinations the router
may still try, with their ``RoutingAid``) and returns one candidate's name, or None
when none fits, which sends the turn to the router's default. The router owns focus,
admission, rerouting and the default; a service only chooses.

- ``SingleDestination``: always the named destination, or the highest-priority one.
- ``KeywordDecisions``: rule-based, from ``RoutingAid.keywords``; pure and instant.
- ``LLMDecisions``: asks a model for a constrained choice among the descriptions;
  a malformed or failed answer is logged and falls back to the default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from xrmq.actors.models import ChatMessage, ChatOptions, LLMService
from xrmq.actors.runtime import get_logger
from xrmq.schemas import AgentTurn, RoutingAid


@runtime_checkable
class DecisionService(Protocol):
    """Choose a destination among ``candidates`` for ``turn``; None means "the default"."""

    async def decide(self, turn: AgentTurn, candidates: Mapping[str, RoutingAid]) -> str | None: ...


def by_priority(candidates: Mapping[str, RoutingAid]) -> str | None:
    """The candidate with the highest priority; the first given wins a tie."""
    best: str | None = None
    for name, aid in candidates.items():
        if best is None or aid.priority > candidates[best].priority:
            best = name
    return best


class SingleDestination:
    """Route every turn to ``name`` while it is a candidate.

    Without a name, the highest-priority candidate (the first registered on a tie): with
    one destination, or with the default registered first, that is "default first".
    """

    def __init__(self, name: str | None = None) -> None:
        if name is not None and not (isinstance(name, str) and name):
            raise ValueError("SingleDestination.name: must be a non-empty string or None")
        self.name = name

    async def decide(self, turn: AgentTurn, candidates: Mapping[str, RoutingAid]) -> str | None:
        if self.name is None:
            return by_priority(candidates)
        return self.name if self.name in candidates else None


def keyword_pattern(keyword: str) -> re.Pattern[str]:
    """Case-insensitive whole-word (or whole-phrase) match of ``keyword``; inner spaces match any
    whitespace."""
    words = keyword.split()
    return re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, words)) + r"(?!\w)", re.IGNORECASE)


def keyword_choice(text: str, candidates: Mapping[str, RoutingAid]) -> str | None:
    """The candidate whose keywords match ``text`` most often; priority, then order, breaks a tie.

    Keywords match whole words or phrases, case-insensitively. None when nothing matches.
    """
    best: tuple[int, int] | None = None
    chosen: str | None = None
    for name, aid in candidates.items():
        hits = sum(
            len(keyword_pattern(keyword).findall(text))
            for keyword in aid.keywords
            if keyword.strip()
        )
        if hits and (best is None or (hits, aid.priority) > best):
            best, chosen = (hits, aid.priority), name
    return chosen


class KeywordDecisions:
    """Rule-based choice from each destination's ``RoutingAid.keywords`` (see
    ``keyword_choice``)."""

    async def decide(self, turn: AgentTurn, candidates: Mapping[str, RoutingAid]) -> str | None:
        return keyword_choice(turn.text, candidates)


NO_DESTINATION = "none"
"""What the model answers when no destination fits."""

DEFAULT_DECISION_INSTRUCTIONS = (
    "You route a user's request to the one destination best suited to handle it. "
    "Reply with exactly one destination name from the list, and nothing else. "
    f"If no destination fits, reply with {NO_DESTINATION}."
)


def decision_messages(
    turn: AgentTurn, candidates: Mapping[str, RoutingAid], instructions: str
) -> list[ChatMessage]:
    """The choice request: instructions, the destinations with their descriptions, the request."""
    listing = "\n".join(f"- {name}: {aid.description}" for name, aid in candidates.items())
    return [
        ChatMessage("system", f"{instructions}\n\nDestinations:\n{listing}"),
        ChatMessage("user", turn.text),
    ]


_CHOICE_TRIM = " \t\r\n\"'`.*:;,!"


def parse_choice(answer: str, names: list[str]) -> str | None:
    """The destination named by a model's ``answer``.

    Accepts the name alone, case-insensitively, with quotes, markdown emphasis or
    trailing punctuation around it; ``none`` means no destination. Raises
    ``ValueError`` for anything else (a sentence, an unknown name, two names).
    """
    cleaned = answer.strip(_CHOICE_TRIM).casefold()
    if cleaned == NO_DESTINATION:
        return None
    for name in names:
        if cleaned == name.casefold():
            return name
    raise ValueError(f"LLMDecisions: answer {answer[:80]!r} names no destination of {names}")


class LLMDecisions:
    """Ask ``llm`` to choose among the candidates' descriptions.

    The request is a constrained choice (reply with one name or ``none``) with thinking
    off, temperature 0 and a few output tokens. A single candidate is chosen without a
    model call. A failed request, a cut-off or an answer ``parse_choice`` rejects is
    logged and returns None, so the router falls back to its default.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        instructions: str = DEFAULT_DECISION_INSTRUCTIONS,
        max_tokens: int = 16,
        timeout_s: float | None = 5.0,
    ) -> None:
        if not instructions.strip():
            raise ValueError("LLMDecisions.instructions: must be non-empty text")
        self.llm = llm
        self.instructions = instructions
        self.options = ChatOptions(
            max_tokens=max_tokens, temperature=0.0, thinking=False, timeout_s=timeout_s
        )
        self._log = get_logger(actor="router.decisions")

    async def decide(self, turn: AgentTurn, candidates: Mapping[str, RoutingAid]) -> str | None:
        if len(candidates) <= 1:
            return next(iter(candidates), None)
        log = self._log.bind(participant=turn.participant_id, turn=turn.turn_id)
        try:
            completion = await self.llm.complete(
                decision_messages(turn, candidates, self.instructions), self.options
            )
            if completion.finish_reason != "stop":
                raise ValueError(f"LLMDecisions: the answer ended with {completion.finish_reason}")
            choice = parse_choice(completion.text, list(candidates))
        except Exception as error:
            log.warning("router.decision_failed", error=str(error), fallback="default")
            return None
        log.debug("router.decided", choice=choice)
        return choice
