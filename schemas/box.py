"""What a running edge box tells its clients about itself.

A client command (``xrmq chat``'s ``/compact``, ``xrmq context compact --tier``) used to
read the box's config from ``--config`` or assume the built-in default, so on a box run
from another file it named the wrong destinations, or waited for an answer that could
not come. The box's supervisor (``xrmq up``) answers a ``BoxInfoRequest`` asked on
``xrmq.box`` with a ``BoxInfo``: what those clients need of the config it runs.
"""

from __future__ import annotations

import msgspec

from ._validation import require, require_name


class BoxInfoRequest(msgspec.Struct, frozen=True):
    """Ask the running box (its supervisor, on ``xrmq.box``) for its ``BoxInfo``."""


class DestinationInfo(msgspec.Struct, frozen=True):
    """One routed destination of the box: its name and ``kind`` (``conversation``,
    ``tools`` or ``realtime``)."""

    name: str
    kind: str

    def __post_init__(self) -> None:
        require_name(self.name, "DestinationInfo", "name")
        require_name(self.kind, "DestinationInfo", "kind")


class BoxInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    """The running box's answer: the config it runs (``config``: its file, or
    ``<built-in default>``), its bus and its destinations, in config order, and the whole
    config as TOML (``config_toml``, every table spelled out: what a client needs beyond
    the destinations, e.g. the context topics and processes; empty when not given)."""

    config: str
    bus: str
    destinations: tuple[DestinationInfo, ...] = ()
    config_toml: str = ""

    def __post_init__(self) -> None:
        names = [destination.name for destination in self.destinations]
        require(len(set(names)) == len(names), "BoxInfo", "destinations", "names must be unique")

    def tools_destinations(self) -> list[str]:
        """The names of its ``kind = "tools"`` destinations (manual compactions go there)."""
        return [d.name for d in self.destinations if d.kind == "tools"]
