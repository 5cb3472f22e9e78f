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
"""

from __future__ import annotations

from pathlib import Path

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
    INTERRUPTED_TOPIC,
    METRICS_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    QUERY_TOPIC,
    SUPERVISOR_TOPIC,
    TURN_ENDED_TOPIC,
    VOICE_OUTPUT_TOPIC,
)

from .config import ConfigError, EdgeConfig

_NS = DEFAULT_NAMESPACE + ".*"
SUPERVISOR_IDENTITY = "xrmq-up"
"""The identity of ``xrmq up`` itself on the bus (runtime ``xrmq-up.<pid>``): it reads every
heartbeat and publishes its report, which is also its probe of the broker."""
SUPERVISOR_PERMISSIONS = Permissions(
    publish=[SUPERVISOR_TOPIC.name],
    sources=["supervisor"],
    subscribe=[METRICS_TOPIC.name, SUPERVISOR_TOPIC.name],
)


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
            publish=[VOICE_OUTPUT_TOPIC.name, TURN_ENDED_TOPIC.name, *route_topics],
            sources=["router", *(f"{name}-*" for name in destinations)],
            subscribe=[  # the output topic and heartbeats: its proxies watch their destinations
                VOICE_OUTPUT_TOPIC.name,
                METRICS_TOPIC.name,
                QUERY_TOPIC.name,
                INTERRUPTED_TOPIC.name,
                PARTICIPANT_JOINED_TOPIC.name,
                PARTICIPANT_LEFT_TOPIC.name,
                *route_topics,
            ],
        )
    if role == "renderer":
        return Permissions(
            subscribe=[VOICE_OUTPUT_TOPIC.name, QUERY_TOPIC.name, INTERRUPTED_TOPIC.name]
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
        [*(config.identity(name) for name in config.processes), SUPERVISOR_IDENTITY]
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
    derived.setdefault(SUPERVISOR_IDENTITY, SUPERVISOR_PERMISSIONS)
    for name, table in config.bus.identities.items():
        base = derived.get(name, Permissions())
        derived[name] = Permissions(
            publish=table.publish if table.publish is not None else base.publish,
            sources=table.sources if table.sources is not None else base.sources,
            subscribe=table.subscribe if table.subscribe is not None else base.subscribe,
            capture=table.capture or base.capture,
        )
    return derived


def broker_security(config: EdgeConfig) -> BrokerSecurity:
    """The secure broker's keys and identities; ``ConfigError`` for a key that is not there."""
    source = config.source
    secret_file = broker_secret_file(config)
    try:
        public, secret = load_secret(secret_file)
    except ValueError as error:
        raise ConfigError(
            source, "bus.security.secret_key", f"{error} (xrmq up --init-keys creates it)"
        ) from None
    authorized = config.path(config.bus.security.authorized or config.bus.security.keys)
    on_file: dict[str, bytes] = {}
    for folder in dict.fromkeys((keys_dir(config), authorized)):
        if folder.is_dir():
            on_file.update({info.name: info.public_key.encode() for info in list_keys(folder)})
    on_file.pop(BROKER_NAME, None)
    identities: dict[str, tuple[bytes, Permissions]] = {}
    granted = permissions(config)
    for name in dict.fromkeys([*granted, *on_file]):
        table = config.bus.identities.get(name)
        if table is not None and table.key is not None:
            key = load_public(table.key.encode())
        elif name in on_file:
            key = on_file[name]
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
                source,
                where,
                f"no public key for identity {name!r}: "
                f"no {name}{PUBLIC_SUFFIX} in {authorized} ({fix})",
            )
        identities[name] = (key, granted.get(name, Permissions()))
    return BrokerSecurity(public, secret, identities)
