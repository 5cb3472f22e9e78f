"""The built-in model's summary in named markdown sections, as a pure function.

A compaction request that names its sections (``prompts.compaction.summary_sections``:
docs/tools.md's ``system_context``, ``overview``, ``key_facts``, ``user_preferences``,
``decisions``, ``pending_tasks``, ``open_questions``, ``tone_context``) gets them from
``OfflineLLM``, so the offline demo shows the same summary shape a hosted model writes.
Still only selection: each sentence of the transcript lines (``User: ...``,
``Assistant: ... [calls NAME(ARGS) as ID]``, ``Tool result ID: ...``) goes to the sections
its kind and words say, then each section keeps its most informative sentences
(``extractive_summary``) within its share of the byte limit. A previous sectioned summary
in the material is merged section by section, so facts survive a chain of summaries.
Sections with nothing in them are left out; the result never exceeds the limit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xrmq.actors.context.salience import extractive_summary

from .extractive import content_lines, is_question

_CALLS = re.compile(r"\s*\[calls (\w+)\((?:[^()]|\([^()]*\))*\) as ([\w.-]+)\]")
_TOOL_RESULT = re.compile(r"^Tool result ([\w.-]+): (.*)$")
_SPEAKER = re.compile(r"^(User|Assistant): (.*)$")
_HEADER = re.compile(r"^#+\s*(\w+)\s*$")
_SENTENCES = re.compile(r"(?<=[.!?])\s+")
_PREFERENCE = re.compile(
    r"\b(prefer|like|love|hate|dislike|want|always|never|rather|favou?rite)\b", re.IGNORECASE
)
_DECISION = re.compile(r"\b(will|decided|chose|choose|going to|plan to|agreed|settled)\b", re.I)
_TASK = re.compile(
    r"^(please |can you |could you |would you )?(read|find|check|look|get|show|tell|remind|"
    r"make|send|open|turn|set|add|remove|survey|compute|book|call|fetch|list|compare)\b",
    re.IGNORECASE,
)
_TONE = re.compile(
    r"\b(thanks|thank you|sorry|urgent|urgently|quickly|asap|hurry|frustrat\w*|annoy\w*|"
    r"great|awesome|brief|briefly|short|detail\w*|formal|casual)\b",
    re.IGNORECASE,
)
_VALUE = re.compile(r"\d|\b[A-Z][a-z]+\b")


def _previous_sections(text: str, names: Sequence[str]) -> dict[str, list[str]]:
    """The lines under each ``## name`` header of a previous summary (headerless: overview)."""
    found: dict[str, list[str]] = {name: [] for name in names}
    current = "overview" if "overview" in found else names[0]
    for raw in text.splitlines():
        header = _HEADER.match(raw.strip())
        if header is not None:
            current = header.group(1) if header.group(1) in found else current
            continue
        line = raw.strip().removeprefix("- ").strip()
        if line and line not in found[current]:
            found[current].append(line)
    return found


def _classify(material: str, names: Sequence[str]) -> dict[str, list[str]]:
    previous, _, transcript = material.rpartition("Transcript:\n")
    if previous.startswith("Previous summary:"):
        sections = _previous_sections(previous.removeprefix("Previous summary:"), names)
    else:
        sections, transcript = {name: [] for name in names}, material

    def put(name: str, sentence: str) -> None:
        if name in sections and sentence not in sections[name]:
            sections[name].append(sentence)

    tools: dict[str, list[str]] = {}
    for line in content_lines(transcript):
        result = _TOOL_RESULT.match(line)
        if result is not None:
            for sentence in _SENTENCES.split(result.group(2)):
                if _VALUE.search(sentence):
                    put("key_facts", f"{result.group(1)}: {sentence}")
            continue
        speaker = _SPEAKER.match(line)
        role, text = (speaker.group(1), speaker.group(2)) if speaker else ("", line)
        for call in _CALLS.finditer(text):
            tools.setdefault(call.group(1), []).append(call.group(2))
        text = _CALLS.sub("", text).strip()
        for sentence in (s for s in _SENTENCES.split(text) if s.strip()):
            put("overview", sentence)
            if role == "User":
                if is_question(sentence):
                    put("open_questions", sentence)
                elif _TASK.match(sentence):
                    put("pending_tasks", sentence)
                elif _PREFERENCE.search(sentence):
                    put("user_preferences", sentence)
                elif _VALUE.search(sentence):
                    put("key_facts", sentence)
                if _TONE.search(sentence):
                    put("tone_context", sentence)
            elif _DECISION.search(sentence):
                put("decisions", sentence)
    for name, ids in tools.items():
        put("system_context", f"Tools called: {name} ({', '.join(ids)}).")
    return sections


def sectioned_summary(material: str, names: Sequence[str], limit_bytes: int) -> str:
    """``material`` summarized under ``## NAME`` headers, in ``names`` order, within
    ``limit_bytes`` UTF-8 bytes (without room for the headers: a plain summary)."""
    if not names:
        return extractive_summary(material, limit_bytes)
    sections = {name: lines for name, lines in _classify(material, names).items() if lines}
    headers = sum(len(f"## {name}\n".encode()) + 2 for name in sections)
    room = limit_bytes - headers
    if not sections or room < 16 * len(sections):
        return extractive_summary(material, limit_bytes)
    parts: list[str] = []
    left, pending = room, len(sections)
    for name in names:
        if name not in sections:
            continue
        share = left // pending
        body = extractive_summary("\n".join(sections[name]), share)
        pending -= 1
        if body:
            left -= len(body.encode())
            parts.append(f"## {name}\n{body}")
    return "\n\n".join(parts)
