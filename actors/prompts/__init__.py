"""Prompt texts shipped as package data, loaded by name."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def load_prompt(name: str) -> str:
    """The text of ``<name>.txt`` in this package, without its trailing newline."""
    return files(__name__).joinpath(f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")
