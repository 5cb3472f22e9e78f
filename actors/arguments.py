"""Validators of command-line arguments: argparse ``type=`` callables.

A bad argument is refused while the command line is parsed, so argparse names it (``xrmq
say: error: argument --timeout: must be ...``) and exits 2, before anything connects or
starts; the value never reaches code that would fail on it with a message of its own
("cannot convert float NaN", "'utf-8' codec can't encode ...") or take it as valid (an
empty topic).

- ``seconds``: a timeout, duration, window or interval: a finite number > 0.
- ``count``: how many (messages, turns, runtimes): a whole number >= 1.
- ``name``: a topic (or topic pattern) or a participant: non-empty, no NUL (NUL ends the
  fields of a wire key, ``xrmq.topics``), UTF-8.
- ``topic_globs``: ``--topic GLOB``: one or more fnmatch patterns, comma-separated (a
  topic name holds no comma in practice; ``[,]`` matches one); each non-blank, without NUL,
  every ``[`` closed (fnmatch would otherwise match it literally and silently find nothing).
- ``participant``: a participant id: non-blank UTF-8 without NUL.
- ``utf8``: any text that goes on the bus; ``words``: text that must also say something.

Text reaches Python from argv decoded as UTF-8 with ``surrogateescape``: a byte that is
not UTF-8 (a Latin-1 terminal) becomes a lone surrogate U+DC80..U+DCFF, which cannot be
encoded again. The error names the original byte and where it is.
"""

from __future__ import annotations

import argparse
import math


def _encodable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(value[error.start])
        what = (
            f"the byte 0x{code - 0xDC00:02x}"
            if 0xDC80 <= code <= 0xDCFF
            else f"the lone surrogate U+{code:04X}"
        )
        raise argparse.ArgumentTypeError(
            f"must be UTF-8 text: {what} at position {error.start} is not UTF-8"
        ) from None
    return value


def seconds(value: str) -> float:
    """A finite number of seconds > 0."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {value!r}")
    return number


def count(value: str) -> int:
    """A whole number >= 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (a whole number), got {value!r}")
    return number


def name(value: str) -> str:
    """A topic, topic pattern or participant: non-empty UTF-8 without NUL."""
    if not value or "\x00" in value:
        raise argparse.ArgumentTypeError("must be a non-empty name without NUL")
    return _encodable(value)


def topic_globs(value: str) -> list[str]:
    """``value``'s comma-separated fnmatch patterns (see the module docstring)."""
    if not name(value).strip():
        raise argparse.ArgumentTypeError(
            f"must be a topic or glob (fnmatch: * ? [seq]), comma-separated, got {value!r}"
        )
    patterns = _split_globs(value)
    for pattern in patterns:
        if not pattern.strip():
            raise argparse.ArgumentTypeError(f"empty pattern in the comma list {value!r}")
        if not _brackets_closed(pattern):
            raise argparse.ArgumentTypeError(
                f"unclosed '[' in {pattern!r} (a literal '[' is written '[[]')"
            )
    return patterns


def _split_globs(value: str) -> list[str]:
    """Split at commas outside ``[...]``, so ``[,]`` stays one pattern."""
    patterns, start, index = [], 0, 0
    while index < len(value):
        if value[index] == "[":
            end = _set_end(value, index)
            index = index if end < 0 else end
        elif value[index] == ",":
            patterns.append(value[start:index])
            start = index + 1
        index += 1
    patterns.append(value[start:])
    return patterns


def _set_end(pattern: str, index: int) -> int:
    """Where the ``]`` closing the set opened at ``pattern[index]`` is, -1 if none (fnmatch's
    rules: a ``]`` right after ``[`` or ``[!`` is a member, not the end)."""
    end = index + 1
    if end < len(pattern) and pattern[end] == "!":
        end += 1
    if end < len(pattern) and pattern[end] == "]":
        end += 1
    return pattern.find("]", end)


def _brackets_closed(pattern: str) -> bool:
    """Whether every ``[`` of ``pattern`` opens a set that a ``]`` closes."""
    index = 0
    while index < len(pattern):
        if pattern[index] == "[":
            index = _set_end(pattern, index)
            if index < 0:
                return False
        index += 1
    return True


def participant(value: str) -> str:
    """A participant id: non-blank UTF-8 without NUL."""
    if not name(value).strip():
        raise argparse.ArgumentTypeError(f"must be a non-blank participant id, got {value!r}")
    return value


def utf8(value: str) -> str:
    """Text that can go on the bus: UTF-8."""
    return _encodable(value)


def words(value: str) -> str:
    """Text that says something: UTF-8, not blank."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must be non-empty text")
    return _encodable(value)
