"""Package discovery for the `xrmq.*` mapping.

The design card keeps `schemas/`, `topics/` and `actors/` at the repository root and
installs them as `xrmq.schemas`, `xrmq.topics` and `xrmq.actors` (pyproject's
`package-dir`). setuptools' own discovery would name the subpackages `actors.runtime`
rather than `xrmq.actors.runtime`, so this lists every package folder under its
installed name; everything else lives in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup

ROOTS = ("schemas", "topics", "actors")


def _packages() -> list[str]:
    found = []
    for root in ROOTS:
        for init in sorted(Path(root).rglob("__init__.py")):
            found.append("xrmq." + ".".join(init.parent.parts))
    return found


# py.typed (PEP 561) marks each root package as typed; *.txt are the prompt texts.
setup(packages=_packages(), package_data={name: ["*.txt", "py.typed"] for name in _packages()})
