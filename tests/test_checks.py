"""The static checks of ``.ci/check`` fail on each kind of violation, with the repository's config.

Each check runs on a tiny violating file (ruff, format, mypy) or on a copy of the
package sources with one forbidden import added (the layering contracts of
``pyproject.toml``, read by import-linter), all under ``tmp_path``: the working tree
is never touched. The tools come from the ``dev`` extra; without it these tests skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install -c constraints.txt -e '.[dev]')")
    return str(path)


def run(*command: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return done.returncode, done.stdout + done.stderr


def test_ruff_check_fails_on_a_lint_violation(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text('import os\n\nprint("unused import above")\n')
    code, output = run(
        tool("ruff"), "check", "--no-cache", "--config", str(PYPROJECT), "bad.py", cwd=tmp_path
    )
    assert code == 1 and "F401" in output, output


def test_ruff_check_fails_on_a_line_over_100_columns(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text(f'TEXT = "{"x" * 100}"\n')
    code, output = run(
        tool("ruff"), "check", "--no-cache", "--config", str(PYPROJECT), "long.py", cwd=tmp_path
    )
    assert code == 1 and "E501" in output, output


def test_ruff_format_check_fails_on_unformatted_code(tmp_path: Path) -> None:
    (tmp_path / "ugly.py").write_text("x = [1,2 ,3]\n")
    ruff = tool("ruff")
    code, output = run(
        ruff, "format", "--check", "--no-cache", "--config", str(PYPROJECT), "ugly.py", cwd=tmp_path
    )
    assert code == 1 and "1 file would be reformatted" in output, output


def test_mypy_fails_on_a_type_error(tmp_path: Path) -> None:
    (tmp_path / "wrong.py").write_text('count: int = "three"\n')
    code, output = run(
        tool("mypy"),
        "--config-file",
        str(PYPROJECT),
        "--cache-dir",
        str(tmp_path / ".mypy_cache"),
        "wrong.py",
        cwd=tmp_path,
    )
    assert code == 1 and "[assignment]" in output, output


def copy_of_the_package(tmp_path: Path) -> Path:
    """The three source folders under ``tmp_path/src/xrmq``, and an ``.importlinter`` file
    holding ``pyproject.toml``'s contracts."""
    package = tmp_path / "src" / "xrmq"
    for folder in ("schemas", "topics", "actors"):
        shutil.copytree(
            ROOT / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    # no xrmq/__init__.py: xrmq is a namespace package, as the editable install makes it
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    indent = "\n    "
    lines = ["[importlinter]", "root_packages =" + indent + indent.join(contracts["root_packages"])]
    lines.append(f"include_external_packages = {contracts['include_external_packages']}")
    for index, contract in enumerate(contracts["contracts"]):
        lines.append(f"\n[importlinter:contract:{index}]\nname = {contract['name']}")
        lines.append(f"type = {contract['type']}")
        for key, value in contract.items():
            if key in ("name", "type"):
                continue
            if isinstance(value, list):
                lines.append(f"{key} =" + indent + indent.join(value))
            else:
                lines.append(f"{key} = {value}")
    (tmp_path / ".importlinter").write_text("\n".join(lines) + "\n")
    return package


def test_the_layering_contracts_keep_the_package_as_it_is(tmp_path: Path) -> None:
    package = copy_of_the_package(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    code, output = run(tool("lint-imports"), "--no-cache", cwd=tmp_path, env=env)
    count = len(tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"])
    assert count == 7  # every contract below has a violation row
    assert code == 0 and f"Contracts: {count} kept, 0 broken." in output, output


@pytest.mark.parametrize(
    ("module", "forbidden", "contract"),
    [
        ("schemas/routing.py", "xrmq.topics", "schemas import nothing of xrmq"),
        # a leaf of actors/: the runtime, say, would break the context core's contract too
        ("topics/_topic.py", "xrmq.actors.clock", "topics import only the schemas"),
        ("actors/context/engine.py", "zmq", "the context core imports no zmq, runtime or models"),
        ("actors/voice/ordering.py", "asyncio", "voice ordering stays pure"),
        (
            "actors/routing/policy.py",
            "asyncio",
            "the router's policy core and lanes stay pure",
        ),
        (
            "actors/routing/lanes.py",
            "xrmq.actors.runtime",
            "the router's policy core and lanes stay pure",
        ),
        ("actors/models/service.py", "xrmq.actors.runtime", "models do not import the runtime"),
        (
            "actors/runtime/mailbox.py",
            "xrmq.actors.edge.config",
            "actors/ is three layers: app, capabilities, kernel",
        ),
    ],
)
def test_the_layering_contracts_fail_on_a_forbidden_import(
    tmp_path: Path, module: str, forbidden: str, contract: str
) -> None:
    package = copy_of_the_package(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    source = package / module
    source.write_text(source.read_text() + f"\nimport {forbidden}  # the violation\n")
    code, output = run(tool("lint-imports"), "--no-cache", cwd=tmp_path, env=env)
    assert code == 1, output
    assert f"{contract} BROKEN" in output, output
    assert "Contracts: 6 kept, 1 broken." in output, output
