"""The ``xrmq`` command line.

Each feature module contributes its subcommands through an ``add_commands(subparsers)``
function listed in ``_COMMAND_MODULES``; a subcommand sets ``func`` to a callable that
takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

_COMMAND_MODULES = (
    "xrmq.actors.runtime.commands",
    "xrmq.actors.edge.commands",
    "xrmq.actors.edge.context_commands",
    "xrmq.actors.voice.commands",
    "xrmq.actors.eval.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xrmq", description="Actor runtime for XR conversational agents on a ZeroMQ bus.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).add_commands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, TimeoutError, RuntimeError) as error:
        print(f"xrmq {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
