"""The running box tells clients about itself: ``BoxInfo`` on ``xrmq.box``.

Why: a client command that needs the box's config (which destinations are ``kind =
"tools"``, for ``/compact toolcall`` and ``xrmq context compact --tier``) used to read it
from ``--config`` or assume the built-in default. On a box run from another file it said
"(the config's tools destinations: none)" or waited its whole timeout for an answer no
destination would give. ``xrmq up``'s supervisor answers ``BoxInfoRequest`` from the
config it runs (``box_info``: the destinations, and the whole config as TOML,
``config_of``); clients ask it (``ask_box_info``) and fall back to their ``--config``
only when no supervisor answers (processes run by systemd units, say).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence

from xrmq.actors.runtime import AgentRuntime, AskError, RuntimeClosedError
from xrmq.schemas import BoxInfo, BoxInfoRequest, DestinationInfo
from xrmq.topics import BOX_TOPIC

from .config import EdgeConfig
from .config_loader import decode_config, default_config
from .configfile import config_toml

BOX_INFO_WAIT_S = 2.0
"""How long a client waits for the supervisor's ``BoxInfo`` (it answers at once from
memory; a box without one costs a client this much before it falls back)."""


def box_info(config: EdgeConfig) -> BoxInfo:
    """What the box running ``config`` tells its clients (without ``config_toml`` when a
    provider option has no TOML form: the destinations still go)."""
    try:
        text = config_toml(config)
    except ValueError:
        text = ""
    return BoxInfo(
        config.source,
        config.bus.address,
        tuple(DestinationInfo(name, d.kind) for name, d in config.destinations.items()),
        text,
    )


def config_of(box: BoxInfo) -> EdgeConfig | None:
    """The config the box runs, from its ``config_toml`` (its relative paths resolved as
    the box's file's); None when it sent none."""
    if not box.config_toml:
        return None
    return decode_config(tomllib.loads(box.config_toml), source=box.config)


def box_config(box: BoxInfo | None) -> EdgeConfig:
    """The running box's config (``config_of``), else the built-in default: no supervisor
    answered (``box`` None), or its config does not decode here (another version)."""
    try:
        return (None if box is None else config_of(box)) or default_config()
    except ValueError:
        return default_config()


async def ask_box_info(
    runtime: AgentRuntime, *, timeout: float = BOX_INFO_WAIT_S
) -> BoxInfo | None:
    """The running box's ``BoxInfo``; None when no supervisor answered within ``timeout``
    (or the runtime stopped first)."""
    try:
        info: BoxInfo = await runtime.ask(
            BOX_TOPIC, BoxInfoRequest(), reply_type=BoxInfo, timeout=timeout
        )
    except (TimeoutError, AskError, RuntimeClosedError):
        return None
    return info


def tools_destination_of(
    named: str | None, last: str | None, tools: Sequence[str] | None, whose: str
) -> str:
    """The tools destination a manual compaction goes to; ``ValueError`` saying why none.

    ``named``: the one the user named; ``last``: the destination that answered last (a
    chat's default); ``tools``: the tools destinations known (``whose``: "the box's" or
    "the config's"), None when unknown. A named or last destination must be one of
    ``tools`` when they are known; with nothing named, the only one of ``tools`` is taken.
    """
    listed = f"({whose} tools destinations: {', '.join(tools or ()) or 'none'})"
    if named is not None:
        if tools is not None and named not in tools:
            raise ValueError(f"{named!r} is not a tools destination {listed}")
        return named
    if last is not None and (tools is None or last in tools):
        return last
    if tools is not None and len(tools) == 1:
        return tools[0]
    raise ValueError(f"name the tools destination {listed}")
