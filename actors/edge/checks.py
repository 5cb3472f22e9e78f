"""What ``xrmq up`` checks before it starts anything: the box can answer, and can start.

Why: a config can be valid key by key and still run a box that answers nothing (no
destination), answers every turn twice (the router in two processes), or crashes on
start in a loop that restarting cannot fix (an unset API key, a bus another ``xrmq up``
already serves). Each is one ``ConfigError`` naming the key and the rule, raised by
``xrmq up --check`` and by ``xrmq up`` before its first process starts (exit code 2, one
message). (A file with only ``[models]`` is not one of them: it runs the default box's
processes, ``config.with_default_box``.)

A model server that is down is not a config error (it may come up later), but a box that
reports ready while every answer will fail misleads: ``xrmq up`` probes each http(s)
model endpoint with a TCP connect at start and warns of one that does not answer
(``unanswered_model_endpoints``).

The answer-path rules apply to configs built from the built-in roles; a config that
also runs an application's own roles (``package.module:function``) may route and
answer in those, so only the duplicate and key rules apply to it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from xrmq.actors.models import ModelSpec
from xrmq.actors.runtime.address import parse_bus

from .config import ConfigError, EdgeConfig
from .telemetry import otlp_headers

ONCE_ROLES = ("router", "conversation", "context", "renderer")
"""Built-in roles that must run in one process entry: in two, every turn would be routed,
answered or spoken twice, or a participant's context kept twice."""
UNSHARDED_ROLES = ("router", "conversation", "renderer")
"""Built-in roles whose replicas do not shard: each replica would take every turn."""


def check_can_answer(config: EdgeConfig) -> None:
    """Raise ``ConfigError`` for a config whose box could not answer a turn or start.

    Rules: at least one process; each of ``ONCE_ROLES`` in one process entry and each of
    ``UNSHARDED_ROLES`` with one replica; without application roles, a ``router`` and a
    ``conversation`` process and at least one destination; no ``voice`` role beside a
    ``kind = "realtime"`` destination (both answer ``audio.in``); every ``api_key_env`` of
    a model a built-in role uses names a set environment variable; a ``telemetry.otlp_endpoint``
    with a router needs the ``otel`` extra installed.
    """
    source = config.source
    if not config.processes:
        raise ConfigError(
            source,
            "processes",
            "none configured: `xrmq up` would start a bus that answers "
            "nothing (examples/edge-box.toml lists the processes)",
        )
    runs: dict[str, str] = {}
    custom = False
    for name, process in config.processes.items():
        for index, role in enumerate(process.roles):
            custom = custom or ":" in role
            if role in ONCE_ROLES:
                if role in runs:
                    raise ConfigError(
                        source,
                        f"processes.{name}.roles[{index}]",
                        f"role {role!r} already runs in process {runs[role]!r}: "
                        "a role of the answer path runs in one process",
                    )
                runs[role] = name
            if role in UNSHARDED_ROLES and process.replicas != 1:
                raise ConfigError(
                    source,
                    f"processes.{name}.replicas",
                    f"must be 1 for role {role!r}: its replicas do not shard, each would "
                    "take every turn",
                )
    if not custom:
        for role, why in (
            ("router", "queries on voice.query would get no answer"),
            ("conversation", "the router's destinations would be served by nobody"),
        ):
            if role not in runs:
                raise ConfigError(source, "processes", f"no process runs the {role!r} role: {why}")
    realtimes = [name for name, d in config.destinations.items() if d.kind == "realtime"]
    for name, process in config.processes.items():
        if realtimes and "voice" in process.roles:
            raise ConfigError(
                source,
                f"processes.{name}.roles[{process.roles.index('voice')}]",
                f"the 'voice' role and the realtime destination {realtimes[0]!r} both answer "
                "audio.in: every utterance would be answered twice (a realtime destination "
                "hears the participant itself)",
            )
    if ("router" in runs or "conversation" in runs) and not config.destinations:
        raise ConfigError(
            source, "destinations", "none configured: the router has no destination for a turn"
        )
    for key, spec in _models_in_use(config, _all_roles(config)):
        if spec.api_key_env is not None and not os.environ.get(spec.api_key_env):
            raise ConfigError(
                source, f"{key}.api_key_env", f"environment variable {spec.api_key_env} is not set"
            )
    if config.telemetry.otlp_endpoint and "router" in runs:
        try:
            otlp_headers()
        except ValueError as error:
            raise ConfigError(source, "telemetry.otlp_endpoint", str(error)) from None
    if "conversation" in _all_roles(config):
        for name, destination in config.destinations.items():
            realtime = destination.realtime
            if realtime is None or realtime.provider != "openai" or realtime.api_key_env is None:
                continue
            if not os.environ.get(realtime.api_key_env):
                raise ConfigError(
                    source,
                    f"destinations.{name}.realtime.api_key_env",
                    f"environment variable {realtime.api_key_env} is not set",
                )


def _all_roles(config: EdgeConfig) -> set[str]:
    return {role for process in config.processes.values() for role in process.roles}


def _models_in_use(config: EdgeConfig, roles: set[str]) -> list[tuple[str, ModelSpec]]:
    """(config key, spec) of every model the built-in ``roles`` create."""
    used: list[tuple[str, ModelSpec]] = []
    if roles & {"conversation", "compaction"}:
        used.append(("models.compaction", config.models.compaction))
    if "conversation" in roles:
        for name, destination in config.destinations.items():
            if destination.model is not None:
                used.append((f"destinations.{name}.model", destination.model))
            else:
                used.append(("models.answers", config.models.answers))
    if "router" in roles and config.router.decisions == "llm":
        used.append(("models.routing", config.models.routing))
    return used


def check_bus_free(config: EdgeConfig) -> None:
    """Raise ``ConfigError`` (``bus.address``) when a broker already serves the config's bus.

    An ipc bus is served while its lock file is locked (``Broker`` holds it); a tcp bus
    while its publish port cannot be bound.
    """
    address = parse_bus(config.bus.address)
    paths = address.ipc_paths
    if paths:
        lock = Path(str(paths[0]).removesuffix(".in") + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            raise ConfigError(
                config.source,
                "bus.address",
                f"{config.bus.address!r} is already served by a "
                "running broker (another `xrmq up`?)",
            ) from None
        finally:
            os.close(fd)
        return
    if address.publish.startswith("tcp://"):
        host, _, port = address.publish[len("tcp://") :].rpartition(":")
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host.strip("[]") if host not in ("*", "") else "", int(port)))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        config.source,
                        "bus.address",
                        f"{config.bus.address!r}: port {port} is already in use "
                        "(another `xrmq up`?)",
                    ) from None


PROBE_TIMEOUT_S = 1.0
"""How long the start-up probe waits for a model endpoint to accept a TCP connection."""


def model_endpoints(config: EdgeConfig) -> list[tuple[str, str]]:
    """(config key, URL) of every http(s) ``api_base`` the box's models use, each URL once.

    The models of the built-in roles it runs; every configured model when it also runs an
    application's roles (they may use any of them).
    """
    roles = _all_roles(config)
    if any(":" in role for role in roles):
        used = [
            (f"models.{name}", getattr(config.models, name))
            for name in ("answers", "compaction", "routing")
        ]
        used += [
            (f"destinations.{name}.model", destination.model)
            for name, destination in config.destinations.items()
            if destination.model is not None
        ]
    else:
        used = _models_in_use(config, roles)
    endpoints: dict[str, str] = {}
    for key, spec in used:
        url = spec.api_base
        if url is not None and url.startswith(("http://", "https://")):
            endpoints.setdefault(url, key)
    return [(key, url) for url, key in endpoints.items()]


def probe_endpoint(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why ``url``'s host and port did not accept a TCP connection within ``timeout_s``
    (``connection refused``, ``no connection within 1s``, ...); None when it did.

    Only the connection is tried: no request, so no key and no model is needed.
    """
    parsed = urlsplit(url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return "no valid port in the URL"
    if not parsed.hostname:
        return "no host in the URL"
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no connection within {timeout_s:g}s"
    except OSError as error:
        return (error.strerror or str(error)).lower()


def unanswered_model_endpoints(config: EdgeConfig) -> list[str]:
    """One warning per model endpoint of ``config`` that did not answer the probe
    (``xrmq up`` prints them at start and keeps running: the server may come up later)."""
    warnings = []
    for key, url in model_endpoints(config):
        reason = probe_endpoint(url)
        if reason is not None:
            warnings.append(
                f"model endpoint {url} did not answer ({key}: {reason}); "
                "its turns will fail until it does"
            )
    return warnings
