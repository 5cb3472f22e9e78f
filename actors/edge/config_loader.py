"""Reading the edge-box config: a TOML file (or document) into a validated ``EdgeConfig``.

``load_config`` reads a file, ``decode_config`` a decoded document, ``default_config``
is the built-in default that needs no file. Each value is converted to its table's type
(a value that does not fit is explained from the type's structure, ``xrmq.actors.explain``:
the key and the rule), then the numbers are held to their ranges (``config_ranges``) and
the rules across keys checked (``config_rules``); the first broken rule is one
``ConfigError`` naming the file, the dotted key and the rule.

A file that names no processes runs the built-in default box (``DEFAULT_BOX``) with its
changes: the most common first edit is "use my model", a file with only ``[models]``
(``with_default_box``; ``EdgeConfig.defaulted`` says which tables it took).
Pure apart from reading the file: no sockets, no directories, no imports of the roles
(``roles.check_roles`` resolves role names separately).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from xrmq.actors.context.config import ContextTable, TopicTable
from xrmq.actors.explain import explain, kind_of
from xrmq.actors.models import ModelSpec, parse_model_spec
from xrmq.actors.voice.config import VoiceConfig

from .config import (
    DEFAULT_SOURCE,
    TABLE_NAME,
    BusConfig,
    ConfigError,
    DestinationConfig,
    EdgeConfig,
    IdentityConfig,
    ModelsConfig,
    ProcessConfig,
    RouterConfig,
    SupervisorConfig,
    TelemetryConfig,
)
from .config_ranges import check_ranges
from .config_rules import check_rules, check_values

DEFAULT_BOX: dict[str, Any] = {
    "context": {"topics": {"scene": {"mode": "summary"}, "notes": {"mode": "incremental"}}},
    "destinations": {
        "conversation": {
            "description": (
                "General assistant: answers questions from its own knowledge and the "
                "participant's context."
            ),
        }
    },
    "router": {"default": "conversation"},
    "processes": {
        "context": {"roles": ["context"], "nice": 19},
        "compaction": {"roles": ["compaction"], "after": ["context"], "nice": 19},
        "conversation": {"roles": ["conversation"], "after": ["context"]},
        "router": {"roles": ["router"], "after": ["conversation"]},
        "renderer": {"roles": ["renderer"]},
    },
}
"""The built-in default box as a TOML document (``default_config``)."""


def with_default_box(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], tuple[str, ...]]:
    """``raw`` and the tables it takes from ``DEFAULT_BOX`` (dotted names, in order).

    A document that names no processes (no ``[processes]`` or an empty one) gets the
    default box's; and, where it names none of its own, the default box's destination
    (with ``router.default``) and context topics. Anything else it sets is kept. A
    document that names processes is returned unchanged: it describes its box itself.
    """
    if raw.get("processes"):
        return raw, ()
    box = {**raw, "processes": DEFAULT_BOX["processes"]}
    defaulted = ["processes"]
    router = raw.get("router", {})
    if not raw.get("destinations") and isinstance(router, dict):
        box["destinations"] = DEFAULT_BOX["destinations"]
        box["router"] = {**DEFAULT_BOX["router"], **router}
        defaulted.append("destinations")
    context = raw.get("context", {})
    if isinstance(context, dict) and not context.get("topics"):
        box["context"] = {**context, "topics": DEFAULT_BOX["context"]["topics"]}
        defaulted.append("context.topics")
    return box, tuple(defaulted)


def load_config(path: str | Path) -> EdgeConfig:
    """Read and validate the TOML file at ``path``; ``ConfigError`` naming file, key and rule."""
    source = str(path)
    try:
        text = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(source, "", f"cannot read: {error.strerror or error}") from None
    try:
        raw = tomllib.loads(text.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(source, "", f"invalid TOML: {error}") from None
    return decode_config(raw, source=source)


def default_config() -> EdgeConfig:
    """The built-in default: every actor of the edge box on the default bus, offline models.

    A summary topic ``scene`` and an incremental topic ``notes``; one conversation
    destination; context sections, compaction workers, conversation, router and voice
    renderer in processes of their own (``DEFAULT_BOX``). ``examples/edge-box.toml``
    spells out the same.
    """
    return decode_config(DEFAULT_BOX)


def decode_config(raw: Mapping[str, Any], *, source: str = DEFAULT_SOURCE) -> EdgeConfig:
    """Validate a decoded TOML document into ``EdgeConfig``; ``ConfigError`` on the first broken
    rule."""
    raw, defaulted = with_default_box(raw)
    top = _convert(raw, _RawTop, "", source)
    models = _models(top.models, source)
    context = _context(top.context, source)
    destinations = {
        name: _destination(value, f"destinations.{name}", source)
        for name, value in _table(top.destinations, "destinations", source).items()
    }
    processes = {
        name: _convert(value, ProcessConfig, f"processes.{name}", source)
        for name, value in _table(top.processes, "processes", source).items()
    }
    config = EdgeConfig(
        bus=_bus(top.bus, source),
        models=models,
        context=context,
        destinations=destinations,
        router=_convert(top.router, RouterConfig, "router", source),
        supervisor=_convert(top.supervisor, SupervisorConfig, "supervisor", source),
        processes=processes,
        voice=_convert(top.voice, VoiceConfig, "voice", source),
        telemetry=_convert(top.telemetry, TelemetryConfig, "telemetry", source),
        source=source,
        defaulted=defaulted,
    )
    check_values(config, source)
    check_ranges(config, source)
    check_rules(config, source)
    return config


class _RawTop(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    bus: dict[str, Any] = {}
    models: dict[str, Any] = {}
    context: dict[str, Any] = {}
    destinations: dict[str, Any] = {}
    router: dict[str, Any] = {}
    supervisor: dict[str, Any] = {}
    processes: dict[str, Any] = {}
    voice: dict[str, Any] = {}
    telemetry: dict[str, Any] = {}


def _bus(raw: dict[str, Any], source: str) -> BusConfig:
    """``[bus]``, its identities converted one by one so an error names ``bus.identities.NAME``."""
    identities_raw = raw.get("identities", {})
    if not isinstance(identities_raw, dict):
        kind = kind_of(identities_raw)
        raise ConfigError(source, "bus.identities", f"must be a table, got {kind}")
    identities = {
        name: _convert(value, IdentityConfig, f"bus.identities.{name}", source)
        for name, value in _table(identities_raw, "bus.identities", source).items()
    }
    bus: BusConfig = _convert({**raw, "identities": {}}, BusConfig, "bus", source)
    return msgspec.structs.replace(bus, identities=identities)


def _table(value: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    for name in value:
        if not TABLE_NAME.match(name):
            raise ConfigError(
                source,
                f"{key}.{name}",
                "names use letters, digits, '-' and '_', starting with a letter or digit",
            )
    return value


def _convert(value: Any, type_: type, key: str, source: str) -> Any:
    """``msgspec.convert``; a value that does not fit is explained from ``type_``'s structure
    (``xrmq.actors.explain``: the key, and the rule its type and ``msgspec.Meta`` state)."""
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as error:
        problem = explain(value, type_)
        if problem is None:  # a rule the walk does not model: msgspec's own words
            raise ConfigError(source, key, str(error)) from None
        raise ConfigError(source, problem.key(key), problem.rule) from None


def _join(key: str, field: str) -> str:
    return f"{key}.{field}" if key else field


def _model(value: Any, key: str, source: str) -> ModelSpec:
    """``parse_model_spec`` with its errors (``ModelSpec.<field>: <rule>``, read from the
    type's structure or stated by ``ModelSpec`` itself) placed under ``key``."""
    try:
        return parse_model_spec(value)
    except ValueError as error:
        head, _, rule = str(error).partition(": ")
        field = head.removeprefix("ModelSpec").lstrip(".")
        if field == "preset" and isinstance(value, str):
            field = ""  # the value itself is the preset name
        raise ConfigError(source, _join(key, field) if field else key, rule) from None


def _models(raw: dict[str, Any], source: str) -> ModelsConfig:
    for name in raw:
        if name not in ModelsConfig.__struct_fields__:
            close = difflib.get_close_matches(name, ModelsConfig.__struct_fields__, n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else f" (allowed: {', '.join(ModelsConfig.__struct_fields__)})"
            )
            raise ConfigError(source, f"models.{name}", f"unknown key{hint}")
    return ModelsConfig(
        **{name: _model(value, f"models.{name}", source) for name, value in raw.items()}
    )


def _destination(raw: Any, key: str, source: str) -> DestinationConfig:
    if isinstance(raw, dict) and "model" in raw:
        spec = _model(raw["model"], f"{key}.model", source)
        raw = {**raw, "model": msgspec.structs.asdict(spec)}
    return _convert(raw, DestinationConfig, key, source)


def _context(raw: dict[str, Any], source: str) -> ContextTable:
    topics_raw = raw.get("topics", {})
    if not isinstance(topics_raw, dict):
        raise ConfigError(source, "context.topics", f"must be a table, got {kind_of(topics_raw)}")
    topics = {
        name: _convert(value, TopicTable, f"context.topics.{name}", source)
        for name, value in topics_raw.items()
    }
    settings: ContextTable = _convert({**raw, "topics": {}}, ContextTable, "context", source)
    return msgspec.structs.replace(settings, topics=topics)
