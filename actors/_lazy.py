"""Package names loaded on first use (PEP 562), so importing a package costs nothing.

A package lists ``name -> module`` and binds ``__getattr__, __dir__ = lazy_exports(...)``:
``from xrmq.actors.voice import VoiceOrdering`` then imports only the pure ordering
module, not the renderer and ZeroMQ beside it. The package also imports the same names
under ``TYPE_CHECKING``, so type checkers see them typed.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``; ``exports`` maps each public name to the
    module that defines it (absolute, or relative to ``package`` with a leading dot)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
