"""The rules of the edge-box config that its types and ranges cannot state.

Once a file is decoded (each value held to its type, ``msgspec.Meta`` and ``Literal``
choices) and its numbers to their ranges (``config_ranges``), ``check_rules`` checks
what spans keys: names that refer to each other (``router.default``, ``after``,
identities), timings against each other, the bus address and its security, the
``[context]`` budgets and prompts, each capability's own rules (``realtime_problem``,
``voice_problem``), the process dependency graph. ``check_values`` holds the few single
numbers whose rule says more than a range and is checked before the ranges. Each raises
``ConfigError`` at the key that has to change.
"""

from __future__ import annotations

import re

from xrmq.actors.context.config import ContextTable
from xrmq.actors.realtime.config import RealtimeConfig, realtime_problem
from xrmq.actors.runtime.address import is_loopback_tcp, parse_bus
from xrmq.actors.voice.config import VoiceConfig, value_problem, voice_problem

from .config import (
    TABLE_NAME,
    TOOL_IDENTITY_NAMES,
    AutoCompactConfig,
    ConfigError,
    DestinationConfig,
    EdgeConfig,
    RestartPolicyConfig,
)

COMPACTOR = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
"""A custom compactor as a destination names it: ``package.module:Class``."""

ROLE = re.compile(r"^(?:[a-z][a-z0-9-]*|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
"""A role as a process names it: a built-in role's name or ``package.module:function``."""


def check_values(config: EdgeConfig, source: str) -> None:
    """The rules of single numbers that say more than their range (``config_ranges``);
    checked before it."""
    if config.bus.security.rescan_s < 0:
        raise ConfigError(source, "bus.security.rescan_s", "must be >= 0 (0: never re-scan)")
    for name, destination in config.destinations.items():
        if destination.kind != "tools":
            continue
        key = f"destinations.{name}"
        if destination.max_iterations < 1:
            raise ConfigError(source, f"{key}.max_iterations", "must be >= 1")
        if destination.tool_timeout_s <= 0:
            raise ConfigError(source, f"{key}.tool_timeout_s", "must be > 0")
        if destination.auto_compact.token_threshold <= 0:
            raise ConfigError(source, f"{key}.auto_compact.token_threshold", "must be > 0")
    problem = value_problem(config.voice)
    if problem is not None:
        raise ConfigError(source, f"voice.{problem[0]}", problem[1])
    for name, process in config.processes.items():
        if not 0 <= process.nice <= 19:
            raise ConfigError(
                source,
                f"processes.{name}.nice",
                "must be in [0, 19] (a process may lower its priority, not raise it)",
            )


def check_rules(config: EdgeConfig, source: str) -> None:
    """The rules across keys, ``[context]``'s first; ``ConfigError`` at the first broken."""
    _check_context(config.context, source)
    _validate(config, source)


def _check_context(settings: ContextTable, source: str) -> None:
    """The rules of ``[context]`` beyond each value's type and range."""
    if settings.state_dir is not None and not settings.state_dir.strip():
        raise ConfigError(source, "context.state_dir", "must be a non-empty path")
    try:
        settings.prompts.prompts()
    except ValueError as error:
        field, _, rule = str(error).removeprefix("CompactionPrompts.").partition(": ")
        raise ConfigError(source, f"context.prompts.{field}", rule) from None
    try:
        settings.options()
    except ValueError as error:
        # Budgets and names were held to their types at decoding; what is left are the
        # rules across keys, reported at the key that has to change.
        parameter, _, rule = str(error).partition(": ")
        raise ConfigError(
            source, _CONTEXT_KEYS.get(parameter, f"context.{parameter}"), rule
        ) from None


_CONTEXT_KEYS = {
    "summary_context_topics": "context.topics",
    "incremental_context_topics": "context.topics",
}
"""The edge key of a ``ContextPlan`` field whose name differs in the TOML table."""


def _check_destination_kind(name: str, destination: DestinationConfig, source: str) -> None:
    key = f"destinations.{name}"
    if destination.realtime is not None and destination.kind != "realtime":
        raise ConfigError(
            source, f"{key}.realtime", 'only a kind = "realtime" destination has a realtime session'
        )
    if destination.kind == "realtime":
        _check_realtime(destination.realtime or RealtimeConfig(), f"{key}.realtime", source)
    if destination.kind != "tools":
        if destination.tool_servers:
            raise ConfigError(
                source, f"{key}.tool_servers", 'only a kind = "tools" destination calls tools'
            )
        for field, is_set in (
            ("compactor", destination.compactor is not None),
            ("auto_compact", destination.auto_compact != AutoCompactConfig()),
        ):
            if is_set:
                raise ConfigError(
                    source,
                    f"{key}.{field}",
                    'only a kind = "tools" destination compacts a tool transcript',
                )
        return
    if destination.compactor is not None and not COMPACTOR.match(destination.compactor):
        raise ConfigError(
            source,
            f"{key}.compactor",
            f"must be package.module:Class, got {destination.compactor!r}",
        )
    for server in destination.tool_servers:
        if not (0 < len(server) <= 40 and all(c.isalnum() or c == "-" for c in server)):
            raise ConfigError(
                source, f"{key}.tool_servers", f"{server!r}: must be 1-40 letters, digits or '-'"
            )


def _check_realtime(realtime: RealtimeConfig, key: str, source: str) -> None:
    problem = realtime_problem(realtime)
    if problem is not None:
        raise ConfigError(source, f"{key}.{problem[0]}", problem[1])


def _check_voice(voice: VoiceConfig, source: str) -> None:
    problem = voice_problem(voice)
    if problem is not None:
        raise ConfigError(source, f"voice.{problem[0]}", problem[1])


def _validate(config: EdgeConfig, source: str) -> None:
    """Rules across keys: names that refer to each other, counts, timings, the bus string."""
    _check_bus(config.bus.address, source)
    _check_security(config, source)
    if config.router.default is not None and config.router.default not in config.destinations:
        raise ConfigError(
            source,
            "router.default",
            f"must name a destination ({', '.join(config.destinations) or 'none configured'}), got "
            f"{config.router.default!r}",
        )
    heartbeat = config.supervisor.metrics_interval_s
    if not config.router.destination_dead_after_s > heartbeat:
        raise ConfigError(
            source,
            "router.destination_dead_after_s",
            f"must be > supervisor.metrics_interval_s (the heartbeat, {heartbeat:g}s)",
        )
    for name, destination in config.destinations.items():
        if not destination.description.strip():
            raise ConfigError(source, f"destinations.{name}.description", "must be non-empty text")
        _check_destination_kind(name, destination, source)
    supervisor = config.supervisor
    if supervisor.liveness_timeout_s < 2 * supervisor.metrics_interval_s:
        raise ConfigError(
            source,
            "supervisor.liveness_timeout_s",
            "must be >= 2 x supervisor.metrics_interval_s (two missed heartbeats),"
            f" got {supervisor.liveness_timeout_s:g}",
        )
    _check_restart(supervisor.restart, "supervisor.restart", source)
    _check_voice(config.voice, source)
    for name, process in config.processes.items():
        key = f"processes.{name}"
        if not process.roles:
            raise ConfigError(source, f"{key}.roles", "must name at least one role")
        for index, role in enumerate(process.roles):
            if not ROLE.match(role):
                raise ConfigError(
                    source,
                    f"{key}.roles[{index}]",
                    "must be a role name (lowercase, '-') or package.module:function, got "
                    f"{role!r}",
                )
            if role in process.roles[:index]:
                raise ConfigError(source, f"{key}.roles[{index}]", f"role {role!r} is listed twice")
        for index, dependency in enumerate(process.after):
            if dependency not in config.processes:
                raise ConfigError(
                    source, f"{key}.after[{index}]", f"must name a process, got {dependency!r}"
                )
            if dependency == name:
                raise ConfigError(
                    source, f"{key}.after[{index}]", "a process cannot wait for itself"
                )
        if process.restart is not None:
            _check_restart(process.restart, f"{key}.restart", source)
    cycle = _cycle(config)
    if cycle:
        raise ConfigError(
            source, f"processes.{cycle[0]}.after", f"dependency cycle: {' -> '.join(cycle)}"
        )


SERVES_EVERY_PARTICIPANT = ("context", "compaction", "conversation", "router")
"""Built-in roles whose actors serve every participant: their identities cannot be bound."""


def _check_participants(
    config: EdgeConfig, name: str, participants: list[str], source: str
) -> None:
    """``bus.identities.NAME.participants``: each a participant id, a prefix ending in ``*``,
    or ``*``; and not on an identity running the box's own actors, which serve everyone."""
    key = f"bus.identities.{name}.participants"
    for index, pattern in enumerate(participants):
        if not pattern.strip() or "\x00" in pattern or "*" in pattern[:-1]:
            raise ConfigError(
                source,
                f"{key}[{index}]",
                f"{pattern!r}: a participant id, a prefix ending in '*' (\"guest-*\"), or '*'",
            )
    if config.bus.identities[name].capture:
        raise ConfigError(
            source,
            key,
            "capture = true reads every participant's messages: an identity bound to "
            "participants cannot have it",
        )
    for process, spec in config.processes.items():
        roles = [role for role in spec.roles if role in SERVES_EVERY_PARTICIPANT]
        if roles and config.identity(process) == name:
            raise ConfigError(
                source,
                key,
                f"identity {name!r} runs role {roles[0]!r} (process {process!r}), whose actors "
                "serve every participant: leave participants out of its table",
            )
    if name in TOOL_IDENTITY_NAMES:
        raise ConfigError(
            source, key, f"{name!r} is xrmq's own tool identity, which serves every participant"
        )


def _check_security(config: EdgeConfig, source: str) -> None:
    from xrmq.actors.runtime.security.acl import Patterns

    security = config.bus.security
    beyond_loopback = is_loopback_tcp(config.bus.address) is False
    if security.mode == "none" and beyond_loopback and not security.insecure:
        raise ConfigError(
            source,
            "bus.address",
            f"{config.bus.address!r} binds tcp beyond loopback without security: "
            "anyone who can reach it owns the bus; "
            'set [bus.security] mode = "curve" (or insecure = true to accept that)',
        )
    if (
        security.mode == "curve"
        and not config.bus.address.startswith(("tcp://", "ipc://"))
        and "://" in config.bus.address
    ):
        raise ConfigError(source, "bus.security.mode", "curve needs an ipc:// or tcp:// bus")
    for name, identity in config.bus.identities.items():
        key = f"bus.identities.{name}"
        if name == "broker":
            raise ConfigError(
                source, key, "'broker' is the broker's own key, not a client identity"
            )
        if identity.key is not None and len(identity.key) != 40:
            raise ConfigError(source, f"{key}.key", "must be a Z85 public key (40 characters)")
        for field in ("publish", "sources", "subscribe"):
            try:
                Patterns(getattr(identity, field) or ())
            except ValueError as error:
                raise ConfigError(source, f"{key}.{field}", str(error)) from None
        if identity.participants is not None:
            _check_participants(config, name, identity.participants, source)
    for name, process in config.processes.items():
        if process.identity is not None and not TABLE_NAME.match(process.identity):
            raise ConfigError(
                source,
                f"processes.{name}.identity",
                "names use letters, digits, '-' and '_', starting with a letter or digit",
            )


def _check_bus(address: str, source: str) -> None:
    if address.startswith("inproc://"):
        raise ConfigError(
            source,
            "bus.address",
            "must be a name, ipc:// or tcp://: the processes of an edge box are separate OS "
            "processes",
        )
    if "://" in address:
        # parse_bus is pure for ipc:// and tcp:// (only a bare name touches the runtime dir)
        try:
            parse_bus(address)
        except ValueError as error:
            raise ConfigError(source, "bus.address", str(error).removeprefix("bus: ")) from None
    elif not address or "/" in address:
        raise ConfigError(
            source,
            "bus.address",
            f"a bus name must be non-empty and contain no '/', got {address!r}",
        )


def _check_restart(policy: RestartPolicyConfig, key: str, source: str) -> None:
    if policy.backoff_max_s < policy.backoff_initial_s:
        raise ConfigError(source, f"{key}.backoff_max_s", "must be >= backoff_initial_s")


def _cycle(config: EdgeConfig) -> list[str]:
    """A dependency cycle among ``after`` lists (as a path that returns to its start), or []."""
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for dependency in config.processes[name].after:
            if state.get(dependency) == 1:
                return [*path[path.index(dependency) :], dependency]
            if dependency not in state and (found := visit(dependency, [*path, dependency])):
                return found
        state[name] = 2
        return []

    for name in config.processes:
        if name not in state and (found := visit(name, [name])):
            return found
    return []
