"""The library's structure: three layers in ``actors/``, no import loops.

import-linter checks the layers contract in ``.ci/check`` (pyproject.toml); these tests
read the same graph from the source (``import_graph``), with type-only and lazy imports,
and check what import-linter cannot: that no module takes part in an import loop. The
checks are themselves checked on a deliberate loop and a deliberate upward import.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import import_graph
from import_graph import APP, CAPABILITY, KERNEL, cycles, graph, layer, upward


def test_the_library_has_no_import_loops() -> None:
    assert cycles(graph()) == []


def test_no_module_imports_a_module_of_a_higher_layer() -> None:
    assert upward(graph()) == []


def test_every_module_of_actors_belongs_to_a_layer() -> None:
    for module in import_graph.modules():
        if module.startswith("xrmq.actors."):
            assert layer(module) in (KERNEL, CAPABILITY, APP), module


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    folder = tmp_path / "actors"
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"xrmq.actors": folder}


def test_the_loop_check_finds_a_loop_through_a_type_only_import(tmp_path: Path) -> None:
    packages = _package(
        tmp_path,
        {
            "__init__.py": "",
            "runtime/__init__.py": "",
            "runtime/a.py": "from .b import B\n",
            "runtime/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from xrmq.actors.runtime.a import A\n"
            ),
        },
    )
    assert cycles(graph(packages)) == [["xrmq.actors.runtime.a", "xrmq.actors.runtime.b"]]


def test_the_layer_check_finds_a_lazy_upward_import(tmp_path: Path) -> None:
    packages = _package(
        tmp_path,
        {
            "__init__.py": "",
            "runtime/__init__.py": "",
            "runtime/mailbox.py": "def late():\n    from ..edge import config\n",
            "edge/__init__.py": "",
            "edge/config.py": "from xrmq.actors.runtime import mailbox\n",
        },
    )
    assert upward(graph(packages)) == [("xrmq.actors.runtime.mailbox", "xrmq.actors.edge.config")]


def test_a_module_outside_the_layers_is_named() -> None:
    with pytest.raises(KeyError, match="nowhere"):
        layer("xrmq.actors.nowhere.thing")
