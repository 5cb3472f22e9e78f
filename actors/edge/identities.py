"""Bus identities of an edge box: each process's key pair and least-privilege permissions.

Each process connects as its ``identity`` (default: its name) with the key pair
``<keys>/<identity>.key_secret``; the broker's pair is ``<keys>/broker.key_secret``.
``xrmq up --init-keys`` creates what is missing (``init_keys``).

A process's permissions are derived from the built-in roles it runs (``role_permissions``):
the renderer only subscribes to the voice topics; the router publishes on the output
topic as ``router`` and on its destinations' route topics; a sensor or client identity
(any other key in the ``authorized`` directory) gets nothing unless its
``[bus.identities.NAME]`` table grants it. A table's ``publish``/``sources``/``subscribe``
replace the derived lists; custom ``package.module:function`` roles derive nothing.

A table's ``participants`` binds a client identity to the participants it may speak and
listen as (``participants = ["alice"]``; ``acl`` has the rules the broker enforces); without
it an identity keeps every participant, and so do the box's own actors and tools, which
serve everyone (the config refuses ``participants`` on their identities).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from xrmq.actors.context.plan import DEFAULT_NAMESPACE
from xrmq.actors.runtime.security.acl import Permissions
from xrmq.actors.runtime.security.forwarder import BROKER_NAME, BrokerSecurity
from xrmq.actors.runtime.security.keys import (
    PUBLIC_SUFFIX,
    SECRET_SUFFIX,
    ensure_keypair,
    list_keys,
    load_public,
    load_secret,
)
from xrmq.topics import (
    BOX_TOPIC,
    INTERRUPTED_TOPIC,
    METRICS_TOPIC,
    PARTICIPANT_FORGOTTEN_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    PLAYBACK_STAGES_TOPIC,
    QUERY_TOPIC,
    SUPERVISOR_TOPIC,
    TURN_ENDED_TOPIC,
    TURNS_TOPIC,
    VOICE_OUTPUT_TOPIC,
)

from .config import CONTEXT_IDENTITY, SUPERVISOR_IDENTITY, ConfigError, EdgeConfig
from .config_loader import load_config

_NS = DEFAULT_NAMESPACE + ".*"
SUPERVISOR_PERMISSIONS = Permissions(
    publish=[SUPERVISOR_TOPIC.name],
    sources=["supervisor"],
    subscribe=[METRICS_TOPIC.name, SUPERVISOR_TOPIC.name, BOX_TOPIC.name],
)

CONTEXT_PERMISSIONS = Permissions(
    publish=[_NS, PARTICIPANT_LEFT_TOPIC.name],
    sources=[DEFAULT_NAMESPACE, _NS, CONTEXT_IDENTITY],
    subscribe=[
        f"{DEFAULT_NAMESPACE}.view",
        f"{DEFAULT_NAMESPACE}.replica.*",
        f"{DEFAULT_NAMESPACE}.host.started",
        PARTICIPANT_FORGOTTEN_TOPIC.name,
    ],
)
TOOL_IDENTITIES = {
    SUPERVISOR_IDENTITY: SUPERVISOR_PERMISSIONS,
    CONTEXT_IDENTITY: CONTEXT_PERMISSIONS,
}
"""The built-in identities of xrmq's own commands, with their least-privilege defaults.
``xrmq up --init-keys`` creates their key pairs; a box without ``xrmq-context``'s key
simply does not admit it."""


def role_permissions(config: EdgeConfig, role: str) -> Permissions:
    """What one built-in role needs on the bus (nothing for a custom role)."""
    topics = list(config.context.topics)
    destinations = list(config.destinations)
    route_topics = [f"route.{name}.*" for name in destinations]
    if role == "context":  # sections: context topics in, views and compaction jobs out
        return Permissions(
            publish=[_NS],
            sources=[_NS],
            subscribe=[
                f"{DEFAULT_NAMESPACE}.dialogue.*",
                f"{DEFAULT_NAMESPACE}.topic.*",
                f"{DEFAULT_NAMESPACE}.host.*",
                *topics,
            ],
        )
    if role == "compaction":  # workers: jobs in, results out
        return Permissions(
            publish=[_NS], sources=[_NS], subscribe=[f"{DEFAULT_NAMESPACE}.worker.*"]
        )
    if role == "conversation":  # answers out as the destination; the context replica in
        return Permissions(
            publish=[VOICE_OUTPUT_TOPIC.name, _NS, *route_topics],
            sources=[
                *destinations,
                "conversation",
                *(f"{name}-*" for name in destinations),
                DEFAULT_NAMESPACE,
                _NS,
            ],
            subscribe=[
                f"{DEFAULT_NAMESPACE}.view",
                f"{DEFAULT_NAMESPACE}.replica.*",
                f"{DEFAULT_NAMESPACE}.host.started",
                *route_topics,
            ],
        )
    if role == "router":
        return Permissions(
            publish=[
                VOICE_OUTPUT_TOPIC.name,
                TURN_ENDED_TOPIC.name,
                TURNS_TOPIC.name,
                PARTICIPANT_FORGOTTEN_TOPIC.name,
                *route_topics,
            ],
            sources=["router", *(f"{name}-*" for name in destinations)],
            subscribe=[  # the output topic and heartbeats: its proxies watch their destinations
                VOICE_OUTPUT_TOPIC.name,
                METRICS_TOPIC.name,
                QUERY_TOPIC.name,
                INTERRUPTED_TOPIC.name,
                PARTICIPANT_JOINED_TOPIC.name,
                PARTICIPANT_LEFT_TOPIC.name,
                PLAYBACK_STAGES_TOPIC.name,
                *route_topics,
            ],
        )
    if role == "renderer":  # its playback stages out, for the router's turn records
        return Permissions(
            publish=[PLAYBACK_STAGES_TOPIC.name],
            sources=["voice_renderer"],
            subscribe=[VOICE_OUTPUT_TOPIC.name, QUERY_TOPIC.name, INTERRUPTED_TOPIC.name],
        )
    return Permissions()


def _union(permissions: list[Permissions]) -> Permissions:
    def merged(field: str) -> list[str]:
        return list(dict.fromkeys(p for perms in permissions for p in getattr(perms, field)))

    return Permissions(
        publish=merged("publish"),
        sources=merged("sources"),
        subscribe=merged("subscribe"),
        capture=any(p.capture for p in permissions),
    )


def keys_dir(config: EdgeConfig) -> Path:
    return config.path(config.bus.security.keys)


def broker_secret_file(config: EdgeConfig) -> Path:
    chosen = config.bus.security.secret_key
    return config.path(chosen) if chosen else keys_dir(config) / f"{BROKER_NAME}{SECRET_SUFFIX}"


def broker_public_file(config: EdgeConfig) -> Path:
    """The broker's public key file, next to its secret one (what clients give as --server-key)."""
    secret = broker_secret_file(config)
    return secret.with_name(secret.name.removesuffix(SECRET_SUFFIX) + PUBLIC_SUFFIX)


def process_key_file(config: EdgeConfig, process: str) -> Path:
    return keys_dir(config) / f"{config.identity(process)}{SECRET_SUFFIX}"


def supervisor_keys(config: EdgeConfig) -> dict[str, Path]:
    """``AgentRuntime`` key arguments of ``xrmq up``'s own runtime ({} on a plain bus)."""
    if config.bus.security.mode != "curve":
        return {}
    return {
        "key": keys_dir(config) / f"{SUPERVISOR_IDENTITY}{SECRET_SUFFIX}",
        "server_key": broker_public_file(config),
    }


def init_keys(config: EdgeConfig) -> list[str]:
    """Create the broker's and every process identity's key pair where missing; their names."""
    folder = keys_dir(config)
    created = []
    secret = broker_secret_file(config)
    if ensure_keypair(secret.name.removesuffix(SECRET_SUFFIX), secret.parent):
        created.append(BROKER_NAME)
    for identity in dict.fromkeys(
        [*(config.identity(name) for name in config.processes), *TOOL_IDENTITIES]
    ):
        if ensure_keypair(identity, folder):
            created.append(identity)
    return created


def permissions(config: EdgeConfig) -> dict[str, Permissions]:
    """Every configured identity's permissions: derived from roles, then the tables' own."""
    by_identity: dict[str, list[Permissions]] = {}
    for name, spec in config.processes.items():
        by_identity.setdefault(config.identity(name), []).extend(
            role_permissions(config, role) for role in spec.roles
        )
    derived = {name: _union(perms) for name, perms in by_identity.items()}
    for name, tool in TOOL_IDENTITIES.items():
        derived.setdefault(name, tool)
    for name, table in config.bus.identities.items():
        base = derived.get(name, Permissions())
        derived[name] = Permissions(
            publish=table.publish if table.publish is not None else base.publish,
            sources=table.sources if table.sources is not None else base.sources,
            subscribe=table.subscribe if table.subscribe is not None else base.subscribe,
            capture=table.capture or base.capture,
            participants=table.participants,
        )
    return derived


def broker_security(config: EdgeConfig) -> BrokerSecurity:
    """The secure broker's keys and identities; ``ConfigError`` for a key that is not there."""
    secret_file = broker_secret_file(config)
    try:
        public, secret = load_secret(secret_file)
    except ValueError as error:
        raise ConfigError(
            config.source, "bus.security.secret_key", f"{error} (xrmq up --init-keys creates it)"
        ) from None
    return BrokerSecurity(public, secret, identity_keys(config, strict=True))


def _authorized_dir(config: EdgeConfig) -> Path:
    return config.path(config.bus.security.authorized or config.bus.security.keys)


def _key_dirs(config: EdgeConfig) -> list[Path]:
    return list(dict.fromkeys((keys_dir(config), _authorized_dir(config))))


def identity_keys(config: EdgeConfig, *, strict: bool) -> dict[str, tuple[bytes, Permissions]]:
    """Every admitted identity: name -> (Z85 public key, permissions).

    An identity is admitted with its table's ``key``, else its ``NAME.key`` in the keys or
    ``authorized`` directory. ``strict`` (the broker's start): a configured identity
    without a key is a ``ConfigError`` naming the fix (``xrmq-context`` excepted: a box
    without its key does not admit it); otherwise (a re-scan) it is left out.
    """
    on_file: dict[str, bytes] = {}
    for folder in _key_dirs(config):
        if folder.is_dir():
            on_file.update({info.name: info.public_key.encode() for info in list_keys(folder)})
    on_file.pop(BROKER_NAME, None)
    identities: dict[str, tuple[bytes, Permissions]] = {}
    granted = permissions(config)
    defaulted = (
        {config.identity(process) for process in config.processes}
        if "processes" in config.defaulted
        else set()
    )
    for name in dict.fromkeys([*granted, *on_file]):
        table = config.bus.identities.get(name)
        if table is not None and table.key is not None:
            key = load_public(table.key.encode())
        elif name in on_file:
            key = on_file[name]
        elif not strict or (name == CONTEXT_IDENTITY and table is None):
            continue
        elif table is None and name in defaulted:
            continue  # a process of the default box the file never named: admitted once keyed
        else:
            where = f"bus.identities.{name}.key" if table is not None else "bus.security.keys"
            own = name == SUPERVISOR_IDENTITY or name in {
                config.identity(process) for process in config.processes
            }
            fix = (
                "xrmq up --init-keys creates it"
                if own
                else f"a client's: xrmq keys new {name} --dir {keys_dir(config)}"
            )
            raise ConfigError(
                config.source,
                where,
                f"no public key for identity {name!r}: "
                f"no {name}{PUBLIC_SUFFIX} in {_authorized_dir(config)} ({fix})",
            )
        identities[name] = (key, granted.get(name, Permissions()))
    return identities


class KeyRescan:
    """The secure broker's re-scan of who it admits, without a restart.

    Each call (``Forwarder`` makes one every ``[bus.security] rescan_s``) looks at the
    public key files of the keys and ``authorized`` directories and at the config file
    (its ``[bus.identities]`` tables) by name, size and modification time, a ``scandir``
    of two small directories and two ``stat`` calls; only when one changed are they
    read again. Then it returns the new identities (a key or table that is not complete
    yet is left out, a config that no longer loads keeps the old ones), else None.

    Why a periodic re-scan rather than a signal: a key arrives by ``xrmq keys new``, a
    copy, or configuration management alike, and nobody needs the broker's pid (it runs
    in a session of its own under ``xrmq up``) or the right to signal it.
    """

    def __init__(self, config: EdgeConfig, log: Any = None) -> None:
        self._config = config
        self._log = log
        self._seen = self._signature()

    def _signature(self) -> tuple[tuple[str, int, int], ...]:
        found = []
        paths = [Path(self._config.source)] if Path(self._config.source).is_file() else []
        for folder in _key_dirs(self._config):
            try:
                paths += [
                    Path(entry.path)
                    for entry in os.scandir(folder)
                    if entry.name.endswith(PUBLIC_SUFFIX)
                ]
            except OSError:
                continue
        for path in paths:
            try:
                info = path.stat()
            except OSError:
                continue
            found.append((str(path), info.st_size, info.st_mtime_ns))
        return tuple(sorted(found))

    def __call__(self) -> dict[str, tuple[bytes, Permissions]] | None:
        seen = self._signature()
        if seen == self._seen:
            return None
        self._seen = seen
        config = self._config
        try:
            if Path(config.source).is_file():
                config = load_config(config.source)
            return identity_keys(config, strict=False)
        except ValueError as error:  # a half-written file: keep the old until it changes again
            if self._log is not None:
                self._log.error("broker.rescan_failed", error=str(error))
            return None
