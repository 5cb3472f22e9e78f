"""What a new realtime session is seeded with, from the participant's checkpoint.

Every (re)connect starts from the instructions (the shared context as it is then), the
latest checkpoint's summary under ``SUMMARY_HEADER``, and the retained tail plus
everything said after the snapshot as conversation items (seed 003's recovery rule,
``Checkpointer.recovered``). Pure: the session shell calls it when it connects.
"""

from __future__ import annotations

from .checkpoint import Checkpointer
from .provider import SeedItem, SessionSeed

SUMMARY_HEADER = "Summary of the conversation so far (earlier sessions):"


def session_seed(instructions: str, checkpointer: Checkpointer, server_vad: bool) -> SessionSeed:
    """What a (re)connect is seeded with: the instructions, the latest checkpoint's
    summary, and the retained tail plus everything said after the snapshot."""
    recovered = checkpointer.recovered()
    parts = [instructions.strip()]
    if recovered.summary:
        parts.append(f"{SUMMARY_HEADER}\n{recovered.summary}")
    items = tuple(SeedItem(message.role, message.text) for message in recovered.messages)
    return SessionSeed("\n\n".join(part for part in parts if part), items, server_vad=server_vad)
