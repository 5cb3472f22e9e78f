"""The running box tells clients about itself: ``BoxInfo`` on ``xrmq.box`` (issue 29, item 6).

Why: a client command that needs the box's config (which destinations are ``kind =
"tools"``, for ``/compact toolcall`` and ``xrmq context compact --tier``) used to read it
from ``--config`` or assume the built-in default. On a box run from another file it said
"(the config's tools destinations: none)" or waited its whole timeout for an answer no
destination would give. ``xrmq up``'s supervisor answers ``BoxInfoRequest`` from the
config it runs (``box_info``); clients ask it (``ask_box_info``) and fall back to their
``--config`` only when no supervisor answers (processes run by systemd units, say).
"""

from __future__ import annotations

from collections.abc import Sequence

from xrmq.actors.runtime import AgentRuntime, AskError, RuntimeClosedError
from xrmq.schemas import BoxInfo, BoxInfoRequest, DestinationInfo
from xrmq.topics import BOX_TOPIC

from .config import EdgeConfig

BOX_INFO_WAIT_S = 2.0
"""How long a client waits for the supervisor's ``BoxInfo`` (it answers at once from
memory; a box without one costs a client this much before it falls back)."""


def box_info(config: EdgeConfig) -> BoxInfo:
    """What the box running ``config`` tells its clients."""
    return BoxInfo(
        config.source,
        config.bus.address,
        tuple(DestinationInfo(name, d.kind) for name, d in config.destinations.items()),
    )


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
