"""Scripted compaction models for the summary-guard tests: a good one, and weak ones.

``good`` answers with the extractive summary of the material (every value it can fit);
``frozen`` returns the previous summary unchanged; ``lossy`` describes the material without
a value. Each takes the ``ChatRequest`` a ``ScriptedLLM`` hands its script.
"""

from __future__ import annotations

import re

from xrmq.actors.context.salience import extractive_summary
from xrmq.actors.models import ChatRequest, compaction_limit


def good(request: ChatRequest) -> str:
    limit = compaction_limit(request.messages[0].content)
    assert limit is not None
    return extractive_summary(request.messages[1].content, limit)


def frozen(request: ChatRequest) -> str:
    """The previous summary unchanged (a good summary when there is none yet)."""
    found = re.search(
        r"<previous_summary>\n(.*)\n</previous_summary>", request.messages[1].content, re.S
    )
    return found.group(1) if found else good(request)


def lossy(request: ChatRequest) -> str:
    return "This material records pressure readings from the building's sensors."
