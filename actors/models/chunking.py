"""Word-sized chunks, the unit the built-in and scripted models stream in."""

from __future__ import annotations

import re
from functools import lru_cache

_CHUNK = re.compile(r"\s*\S+|\s+$")


def word_chunks(text: str) -> list[str]:
    """Split ``text`` into chunks of one word each, whitespace attached in front (as
    tokenizers do), so that ``"".join(word_chunks(text)) == text``."""
    return _CHUNK.findall(text)


def chunk_count(text: str) -> int:
    """``len(word_chunks(text))`` without building the chunks: one chunk per word, and one
    more for whitespace after the last word (``\\s`` and ``str.isspace`` agree).

    The built-in model counts every prompt message as input tokens on every turn, and a
    turn's context repeats the previous turn's lines, so words are counted per line
    (every line break is whitespace: no word spans two lines) and the count of a line is
    remembered, for ``COUNT_CACHE_SIZE`` distinct lines (an LRU).
    """
    return sum(map(_word_count, text.splitlines())) + text[-1:].isspace()


COUNT_CACHE_SIZE = 4096
"""Distinct lines whose word count ``chunk_count`` remembers, least recently used
dropped first: the lines of dozens of participants' contexts, a fixed few MB at most."""


@lru_cache(maxsize=COUNT_CACHE_SIZE)
def _word_count(line: str) -> int:
    return len(line.split())
