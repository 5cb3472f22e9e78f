"""Every number of the edge-box config has a sane range, checked at load and by
``xrmq up --check`` with the key and the range named (issue 29, item 10)."""

from __future__ import annotations

import math
import subprocess
import sys

import msgspec
import pytest

from xrmq.actors.edge.config import ConfigError, EdgeConfig
from xrmq.actors.edge.config_loader import decode_config, default_config
from xrmq.actors.edge.config_ranges import RANGES, range_of

CLI = [sys.executable, "-m", "xrmq.actors.cli"]


def error_of(raw: dict) -> str:
    with pytest.raises(ConfigError) as raised:
        decode_config(raw, source="edge.toml")
    return str(raised.value)


def nested(key: str, value: object) -> dict:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    raw: object = value
    for part in reversed(key.split(".")):
        raw = {part: raw}
    assert isinstance(raw, dict)
    return raw


def test_the_issue_values_are_refused_naming_the_key_and_the_range():
    assert error_of({"bus": {"max_message_bytes": 2**63}}) == (
        "edge.toml: bus.max_message_bytes: must be in [1024, 1073741824], got 9223372036854775808"
    )
    assert error_of({"supervisor": {"ready_timeout_s": 1e308}}) == (
        "edge.toml: supervisor.ready_timeout_s: must be in [0.001, 3600], got 1e+308"
    )
    assert error_of({"supervisor": {"shutdown_timeout_s": math.inf}}) == (
        "edge.toml: supervisor.shutdown_timeout_s: must be in [0.001, 3600], got inf"
    )


def test_a_model_spec_number_out_of_range_is_refused_where_the_model_is_named():
    assert error_of({"models": {"answers": {"preset": "local", "timeout_s": math.inf}}}) == (
        "edge.toml: models.answers.timeout_s: must be in [0.001, 3600], got inf"
    )
    destination = {"description": "x", "model": {"model": "offline", "retries": 1000}}
    assert error_of({"destinations": {"helper": destination}}) == (
        "edge.toml: destinations.helper.model.retries: must be in [0, 100], got 1000"
    )


def test_the_range_table_is_finite_and_ordered():
    for key, (low, high) in RANGES.items():
        assert math.isfinite(low) and math.isfinite(high) and low <= high, key


def full_config() -> EdgeConfig:
    """A config where every optional number is set, so every numeric key is present."""
    realtime = {
        "max_context_tokens": 1000,
        "max_audio_turns": 10,
        "max_audio_duration_s": 60.0,
        "max_session_s": 600.0,
        "server_max_context_tokens": 1000,
    }
    model = {"model": "offline", "temperature": 0.5, "max_tokens": 100}
    return decode_config(
        {
            "models": {"answers": model, "compaction": model, "routing": model},
            "context": {"topics": {"notes": {"mode": "incremental", "budget_bytes": 3000}}},
            "destinations": {
                "talk": {"description": "x", "model": model},
                "tools": {"description": "x", "kind": "tools"},
                "live": {"description": "x", "kind": "realtime", "realtime": realtime},
            },
            "router": {"history_limit": 4},
            "processes": {"p": {"roles": ["context"], "restart": {}}},
        }
    )


def numbers(value: object, key: str = "") -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            if field in ("options", "thinking_off"):  # provider parameters, passed unchanged
                continue
            found += numbers(getattr(value, field), f"{key}.{field}" if key else field)
    elif isinstance(value, dict):
        for name, item in value.items():
            found += numbers(item, f"{key}.{name}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        found.append((key, value))
    return found


def test_every_number_of_the_config_has_a_range_and_its_default_is_inside():
    every = numbers(full_config()) + numbers(default_config())
    assert len({key for key, _ in every}) > 60
    for key, value in every:
        low, high = range_of(key)
        assert low <= value <= high, key


def present(value: object) -> object:
    """``value`` as TOML would write it: tables without their unset (None) keys."""
    if isinstance(value, dict):
        return {name: present(item) for name, item in value.items() if item is not None}
    return value


def merged(base: dict, patch: dict) -> dict:
    out = dict(base)
    for name, value in patch.items():
        out[name] = merged(base.get(name, {}), value) if isinstance(value, dict) else value
    return out


FULL = full_config()
BASE = present(msgspec.to_builtins(FULL))
assert isinstance(BASE, dict)
del BASE["source"], BASE["defaulted"]


@pytest.mark.parametrize("key", sorted({key for key, _ in numbers(FULL)}))
def test_each_number_out_of_range_is_refused_naming_the_key_and_the_range(key):
    low, high = range_of(key)
    current = dict(numbers(FULL))[key]
    if isinstance(current, int):
        bad: list[object] = [int(high) + 1]
    else:
        bad = [float(high) * 2 + 1, math.inf, math.nan]
    for value in bad:
        message = error_of(merged(BASE, nested(key, value)))
        assert message.startswith(f"edge.toml: {key}: must be "), message
        if not (value != value or key.rpartition(".")[2] in OWN_RULE):
            # a NaN, or a bound with its own rule, may be refused first by that rule
            assert message == f"edge.toml: {key}: must be in [{show(low)}, {show(high)}], got " + (
                f"{value!r}"
            )


OWN_RULE = {"compress_at", "rollover_at", "temperature", "vad_threshold", "nice"}
"""Keys whose upper bound has its own rule, stated first (``must be <= 1``)."""


def show(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def test_up_check_refuses_an_out_of_range_value_with_exit_2(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text("[supervisor]\nshutdown_timeout_s = inf\n")
    result = subprocess.run(
        [*CLI, "up", "--check", str(path)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"xrmq up: {path}: supervisor.shutdown_timeout_s: must be in [0.001, 3600], got inf"
    )
