"""The range of every number of the edge-box config, and its check.

A number its type allows can still be absurd: ``shutdown_timeout_s = inf`` waits
forever, ``max_message_bytes = 2**63`` overflows ZeroMQ's C long at start. Every number
of the config has an inclusive, finite range in ``RANGES`` (a capability's table brings
its own: ``VOICE_RANGES``, ``REALTIME_RANGES``), checked once the file is decoded and
before the rules across keys, so the error names the key and its range:
``<file>: <key>: must be in [<min>, <max>], got <value>``.
"""

from __future__ import annotations

import msgspec

from xrmq.actors.realtime.config import REALTIME_RANGES
from xrmq.actors.voice.config import VOICE_RANGES

from .config import ConfigError, EdgeConfig

_SECONDS = (0.001, 3600)
"""A timeout or a wait: a millisecond to an hour."""
_LONG_SECONDS = (0.001, 86_400)
"""A window or a session: up to a day."""
_TEXT_BYTES = (1, 1 << 24)
"""A context budget: up to 16 MiB of rendered text."""
_TOKENS = (1, 10_000_000)

_MODEL_RANGES: dict[str, tuple[float, float]] = {
    "timeout_s": _SECONDS,
    "temperature": (0, 2),
    "max_tokens": (1, 1_000_000),
    "retries": (0, 100),
    "time_to_first_token_s": (0, 3600),
    "tokens_per_second": (0, 1_000_000),
}
"""A model spec's numbers, wherever a spec is named (``models.*``, ``destinations.*.model``)."""

_RESTART_RANGES: dict[str, tuple[float, float]] = {
    "max_crashes": (1, 10_000),
    "window_s": _LONG_SECONDS,
    "backoff_initial_s": _SECONDS,
    "backoff_max_s": _LONG_SECONDS,
}

RANGES: dict[str, tuple[float, float]] = {
    "bus.max_message_bytes": (1024, 1 << 30),
    "bus.subscriber_budget_bytes": (1 << 20, 1 << 34),
    "bus.security.rescan_s": (0, 3600),
    **{f"models.*.{field}": bounds for field, bounds in _MODEL_RANGES.items()},
    "context.dialogue_budget_bytes": _TEXT_BYTES,
    "context.topic_budget_bytes": _TEXT_BYTES,
    "context.compaction_input_budget_bytes": _TEXT_BYTES,
    "context.topics.*.budget_bytes": _TEXT_BYTES,
    "context.retire_idle_s": (1, 86_400),
    "context.max_resident_participants": (1, 10_000_000),
    **{f"destinations.*.model.{field}": bounds for field, bounds in _MODEL_RANGES.items()},
    "destinations.*.max_iterations": (1, 1000),
    "destinations.*.tool_timeout_s": _SECONDS,
    "destinations.*.auto_compact.token_threshold": _TOKENS,
    **{f"destinations.*.realtime.{field}": bounds for field, bounds in REALTIME_RANGES.items()},
    "router.history_limit": (1, 10_000),
    "router.destination_dead_after_s": _SECONDS,
    "supervisor.ready_timeout_s": _SECONDS,
    "supervisor.shutdown_timeout_s": _SECONDS,
    "supervisor.metrics_interval_s": (0.001, 60),
    "supervisor.liveness_timeout_s": _SECONDS,
    "supervisor.stuck_after_s": _LONG_SECONDS,
    **{f"supervisor.restart.{field}": bounds for field, bounds in _RESTART_RANGES.items()},
    "processes.*.replicas": (1, 256),
    "processes.*.compaction_workers": (1, 256),
    "processes.*.nice": (0, 19),
    **{f"processes.*.restart.{field}": bounds for field, bounds in _RESTART_RANGES.items()},
    **{f"voice.{field}": bounds for field, bounds in VOICE_RANGES.items()},
}
"""Every number of the config, by dotted key (``*``: any one table name), and its inclusive
range (finite). A number without an entry is a bug: ``range_of`` raises ``KeyError``."""

_UNCHECKED = ("source", "options", "thinking_off")
"""Fields not walked: the file's name, and provider parameters passed to the provider as
written (their numbers are the provider's to judge)."""


def range_of(key: str) -> tuple[float, float]:
    """The inclusive range of the number at dotted ``key`` (``KeyError`` when it has none)."""
    parts = key.split(".")
    for pattern, bounds in RANGES.items():
        names = pattern.split(".")
        if len(names) == len(parts) and all(n in ("*", p) for n, p in zip(names, parts)):
            return bounds
    raise KeyError(f"{key}: no range in RANGES")


def check_ranges(config: EdgeConfig, source: str) -> None:
    """Raise ``ConfigError`` at the first number outside its range (NaN is outside every one):
    ``<file>: <key>: must be in [<min>, <max>], got <value>``."""
    for key, value in _numbers(config, ""):
        low, high = range_of(key)
        if not low <= value <= high:
            raise ConfigError(
                source, key, f"must be in [{_bound(low)}, {_bound(high)}], got {value!r}"
            )


def _join(key: str, field: str) -> str:
    return f"{key}.{field}" if key else field


def _numbers(value: object, key: str) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            if field not in _UNCHECKED:
                found += _numbers(getattr(value, field), _join(key, field))
    elif isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, msgspec.Struct):
                found += _numbers(item, f"{key}.{name}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        found.append((key, value))
    return found


def _bound(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)
