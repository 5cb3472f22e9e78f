"""Objects a config names by ``package.module:attribute``: roles' functions, destinations'
compactor classes.

A module that is not importable as installed is looked for in the config file's
directory too, so an example's own modules sit next to its config.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from xrmq.actors.tools.policy import CompactorAbstract

from .config import EdgeConfig


def import_attribute(name: str, base: Path | None = None) -> Any:
    """The attribute ``package.module:attribute`` names (``None`` when the module lacks it).

    A module that is not importable as installed is looked for in ``base`` too (the
    config file's directory). ``LookupError`` when the module does not import.
    """
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        top = module_name.split(".")[0]
        nearby = base is not None and ((base / top).is_dir() or (base / f"{top}.py").is_file())
        if base is None or not nearby or str(base) in sys.path:
            raise LookupError(f"cannot import {module_name!r}: {error}") from None
        sys.path.append(str(base))
        return import_attribute(name, base)
    return getattr(module, attribute, None)


def resolve_compactor(name: str, base: Path | None = None) -> type[CompactorAbstract]:
    """The ``CompactorAbstract`` subclass ``package.module:Class`` names (a destination's
    ``compactor``); ``LookupError`` naming the rule otherwise."""
    found = import_attribute(name, base)
    if not (isinstance(found, type) and issubclass(found, CompactorAbstract)):
        raise LookupError(f"{name!r} is not a CompactorAbstract subclass")
    return found


def config_base(config: EdgeConfig) -> Path | None:
    """The config file's directory, where an example's own modules sit (None: no file)."""
    source = Path(config.source)
    return source.parent.resolve() if source.is_file() else None
