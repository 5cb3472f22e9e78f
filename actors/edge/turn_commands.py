"""``xrmq turns``: the command line of ``turns.follow``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from xrmq.actors.arguments import count, name
from xrmq.actors.edge.bus_commands import add_bus_argument, require_broker
from xrmq.actors.runtime import run


def add_commands(subparsers: Any) -> None:
    turns = subparsers.add_parser(
        "turns",
        help="each turn as it ends: its stages (a waterfall), tokens and cost; p50/p95 per stage",
    )
    add_bus_argument(turns)
    turns.add_argument("--participant", type=name, help="only this participant's turns")
    turns.add_argument(
        "--follow",
        action="store_true",
        help="print turns until Ctrl-C (the default without --count)",
    )
    turns.add_argument("--count", type=count, help="stop after this many turns")
    turns.add_argument("--json", action="store_true", help="one JSON record a line, no summary")
    turns.add_argument(
        "--last",
        type=count,
        default=100,
        help="turns the p50/p95 summary is taken over (default 100)",
    )
    turns.set_defaults(func=run_turns)


def run_turns(args: argparse.Namespace) -> int:
    from .turns import follow

    if args.follow and args.count is not None:
        raise ValueError("--follow: runs until Ctrl-C, so it takes no --count")
    require_broker(args.bus)
    return run(
        follow(
            args.bus,
            participant=args.participant,
            as_json=args.json,
            count=args.count,
            last=args.last,
            out=sys.stdout,
        )
    )
