"""Finding suites: every ``bench/*_bench.py`` or ``bench/*_suite.py`` with a ``SUITE``.

A module that fails to import is reported, not fatal: one broken suite must not hide
the others' figures. Modules without ``SUITE`` (a standalone script) are ignored.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from pathlib import Path

from .suite import Suite

ORDER = ("bus", "codec", "turn", "storm", "context", "models")
"""Run order of the suites named in issue 8; other suites run after them, by name."""


def discover() -> tuple[dict[str, Suite], dict[str, str]]:
    """Import the suite modules; return (suites by name, import errors by module)."""
    suites: dict[str, Suite] = {}
    errors: dict[str, str] = {}
    package = Path(__file__).parent
    for info in pkgutil.iter_modules([str(package)]):
        if not info.name.endswith(("_bench", "_suite")):
            continue
        module_name = f"{__package__}.{info.name}"
        try:
            module = importlib.import_module(module_name)
        except Exception:
            errors[module_name] = traceback.format_exc(limit=3)
            continue
        suite = getattr(module, "SUITE", None)
        if isinstance(suite, Suite):
            if suite.name in suites:
                errors[module_name] = f"suite name {suite.name!r} is already taken"
                continue
            suites[suite.name] = suite
    ordered = sorted(
        suites, key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), name)
    )
    return {name: suites[name] for name in ordered}, errors
