"""Layering that import-linter cannot see: what importing a module loads at run time.

import-linter (``lint-imports``, contracts in ``pyproject.toml``) checks the import graph;
these check that the lazy packages keep a pure import pure: a fresh interpreter imports
one module and reports what else got loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("zmq", "uvloop", "litellm", "xrmq.actors.runtime", "xrmq.actors.models")


def loaded_by(statement: str) -> set[str]:
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(result.stdout))


@pytest.mark.parametrize(
    "statement",
    [
        "import xrmq.actors.context.engine",
        "from xrmq.actors.context import Section, SectionSpec, render_participant, context_config",
        "import xrmq.actors.voice.ordering",
        "from xrmq.actors.voice import VoiceOrdering",
        "import xrmq.actors.routing.policy",
        "import xrmq.actors.routing.lanes",
        "import xrmq.actors",
        "import xrmq.topics",
    ],
)
def test_a_pure_import_loads_no_zmq_runtime_or_models(statement: str) -> None:
    loaded = loaded_by(statement)
    assert sorted(name for name in HEAVY if name in loaded) == []


def test_the_model_services_load_no_zmq_and_no_runtime() -> None:
    loaded = loaded_by("import xrmq.actors.models")
    assert "zmq" not in loaded and "xrmq.actors.runtime" not in loaded


def test_the_schemas_load_nothing_else_of_xrmq() -> None:
    loaded = loaded_by("import xrmq.schemas")
    assert (
        sorted(
            name
            for name in loaded
            if name.startswith("xrmq.") and not name.startswith("xrmq.schemas")
        )
        == []
    )


def test_the_lazy_packages_still_export_every_name() -> None:
    import xrmq.actors
    import xrmq.actors.context
    import xrmq.actors.routing
    import xrmq.actors.voice

    for package in (xrmq.actors, xrmq.actors.context, xrmq.actors.routing, xrmq.actors.voice):
        missing = [name for name in package.__all__ if getattr(package, name, None) is None]
        assert missing == [], f"{package.__name__} lacks {missing}"
        assert set(package.__all__) <= set(dir(package))
