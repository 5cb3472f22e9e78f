"""Roles: what a process of the edge box runs, as functions that register actors on a runtime.

A role is ``build(runtime, config, process) -> None``: it registers its actors (and keyed
kinds, with ``process.shard`` of ``process.shards``) on ``runtime`` before it starts,
configured from the ``EdgeConfig``. ``ROLES`` maps the built-in role names to their
builders; a config may also name any ``package.module:function`` with that signature,
so an application runs its own actors in the edge box without registering anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xrmq.actors.runtime import AgentRuntime

from .config import ConfigError, EdgeConfig, ProcessInstance
from .dotted import config_base, import_attribute, resolve_compactor

RoleBuilder = Callable[[AgentRuntime, EdgeConfig, ProcessInstance], None]

ROLES: dict[str, RoleBuilder] = {}
"""Built-in roles by name (``xrmq.actors.edge.stack``), loaded on first lookup."""


def resolve_role(name: str, base: Path | None = None) -> RoleBuilder:
    """The builder ``name`` refers to: a built-in role, or ``package.module:function``.

    A module that is not importable as installed is looked for in ``base`` too (the
    config file's directory), so an example's own roles sit next to its config.

    Raises ``LookupError`` naming the rule (unknown role, module that does not import,
    attribute that is missing or not callable).
    """
    if ":" not in name:
        if name not in ROLES:
            from .stack import (
                BUILTIN_ROLES,
            )  # the whole conversation stack: imported only when a role runs

            for builtin, builder in BUILTIN_ROLES.items():
                ROLES.setdefault(builtin, builder)
        if name not in ROLES:
            known = ", ".join(sorted(ROLES)) or "none"
            raise LookupError(
                f"unknown role {name!r} (built-in roles: {known}; or use package.module:function)"
            )
        return ROLES[name]
    found = import_attribute(name, base)
    if not callable(found):
        raise LookupError(f"{name.partition(':')[0]!r} has no function {name.partition(':')[2]!r}")
    return found


def check_roles(config: EdgeConfig, process: str | None = None) -> dict[str, list[RoleBuilder]]:
    """Resolve the roles of every process (or of ``process``), by process name, after
    every destination's ``compactor``.

    Raises ``ConfigError`` naming the file and ``processes.<name>.roles[<i>]``, so
    ``xrmq up`` refuses a config before it starts anything.
    """
    names = [process] if process is not None else list(config.processes)
    base = config_base(config)
    for destination_name, destination in config.destinations.items():
        if destination.compactor is not None:
            try:
                resolve_compactor(destination.compactor, base)
            except LookupError as error:
                raise ConfigError(
                    config.source, f"destinations.{destination_name}.compactor", str(error)
                ) from None
    resolved: dict[str, list[RoleBuilder]] = {}
    for name in names:
        builders = []
        for index, role in enumerate(config.processes[name].roles):
            try:
                builders.append(resolve_role(role, base))
            except LookupError as error:
                raise ConfigError(
                    config.source, f"processes.{name}.roles[{index}]", str(error)
                ) from None
        resolved[name] = builders
    return resolved
