"""Write an ``EdgeConfig`` to a TOML file that ``load_config`` reads back unchanged
(``config_toml``: the text alone, e.g. for ``BoxInfo``).

Why: the supervisor's children read their config from a file (``xrmq run NAME --config
PATH``), so a stack a command builds in code (``xrmq demo``, ``xrmq chat --private-stack``)
needs its config as a file. Only what ``load_config`` accepts is written: tables of
strings, numbers, booleans and arrays; ``None`` (every such field's default) is left
out. The file is read back and compared, so a config that would not survive the trip
is an error here rather than a different stack in the children.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from .config import EdgeConfig
from .config_loader import load_config


def write_config(config: EdgeConfig, path: str | Path) -> EdgeConfig:
    """Write ``config`` to ``path`` (TOML) and return it as loaded from there (``source`` is
    ``path``).

    Raises ``ValueError`` if the file does not load back to the same config.
    """
    Path(path).write_text(config_toml(config), encoding="utf-8")
    loaded = load_config(path)
    if msgspec.structs.replace(loaded, source=config.source, defaulted=config.defaulted) != config:
        raise ValueError(f"{path}: the written config does not load back unchanged")
    return loaded


def config_toml(config: EdgeConfig) -> str:
    """``config`` as the TOML text ``load_config`` reads (every table it has, spelled out)."""
    raw = _without_none(msgspec.to_builtins(config))
    raw.pop("source", None)
    raw.pop("defaulted", None)
    return _table(raw, ())


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_none(item) for item in value]
    return value


def _table(table: dict[str, Any], path: tuple[str, ...]) -> str:
    """One TOML table: its own keys under its header, then its sub-tables."""
    tables = {key: value for key, value in table.items() if isinstance(value, dict) and value}
    scalars = {key: value for key, value in table.items() if key not in tables}
    out = []
    if path and (scalars or not tables):
        out.append(f"[{'.'.join(path)}]")
    out.extend(f"{key} = {_value(value)}" for key, value in scalars.items())
    text = "\n".join(out) + ("\n\n" if out else "")
    return text + "".join(_table(value, (*path, key)) for key, value in tables.items())


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"write_config: {value!r} has no TOML form the config accepts")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_value(item)}" for key, item in value.items()) + "}"
    raise ValueError(f"write_config: {type(value).__name__} has no TOML form")
