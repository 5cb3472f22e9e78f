"""Word-sized chunks, the unit the built-in and scripted models stream in."""

from __future__ import annotations

import re

_CHUNK = re.compile(r"\s*\S+|\s+$")


def word_chunks(text: str) -> list[str]:
    """Split ``text`` into chunks of one word each, whitespace attached in front (as
    tokenizers do), so that ``"".join(word_chunks(text)) == text``."""
    return _CHUNK.findall(text)
