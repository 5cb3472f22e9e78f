"""Package names loaded on first use (PEP 562), so importing a package costs nothing.

A package lists ``name -> module`` and binds ``__getattr__, __dir__ = lazy_exports(...)``:
``from xrmq.actors.voice import VoiceOrdering`` then imports only the pure ordering
module, not the renderer and ZeroMQ beside it. The package also imports the same names
under ``TYPE_CHECKING``, so type checkers see them typed.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


class _Package(types.ModuleType):
    """A lazy package. An export may share its name with the submodule that defines it
    (``xrmq.actors.routing.remote``, the function, in ``routing/remote.py``): loading the
    submodule binds it on the package under that name, which shadowed the export (so
    ``from xrmq.actors.routing import remote`` gave the module when another name of that
    module had been loaded first); the export is bound instead, as an eager
    ``from .remote import remote`` in the package did."""

    _xrmq_exports: Mapping[str, str] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, types.ModuleType)
            and name in self._xrmq_exports
            and value.__name__ == f"{self.__name__}.{name}"
            and hasattr(value, name)
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


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

    module = sys.modules[package]
    module.__class__ = _Package
    module._xrmq_exports = dict(exports)  # type: ignore[attr-defined]  # a _Package now
    return __getattr__, __dir__
