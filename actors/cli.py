"""The ``xrmq`` command line.

Each feature module contributes its subcommands through an ``add_commands(subparsers)``
function listed in ``_COMMAND_MODULES``; a subcommand sets ``func`` to a callable that
takes the parsed arguments and returns the exit code.

Every command takes ``-q`` (problems only) and ``-v`` (more; twice for debug). Without
them the log level is ``$XRMQ_LOG_LEVEL``, else INFO for the long-running commands
(``up``, ``run``, ``bus``) and WARNING for the others, whose output is their result. The
level a flag sets is exported, so the processes ``xrmq up`` starts follow it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib import metadata

_COMMAND_MODULES = (
    "xrmq.actors.edge.bus_commands",
    "xrmq.actors.edge.box_commands",
    "xrmq.actors.edge.context_commands",
    "xrmq.actors.edge.turn_commands",
    "xrmq.actors.edge.voice_commands",
    "xrmq.actors.eval.eval_cli",
)
LONG_RUNNING = frozenset({"up", "run", "bus"})
"""Commands whose logs are their output: INFO by default."""
SUPERVISED = frozenset({"run", "bus"})
"""Commands ``xrmq up`` runs as its processes: exit code 2 only for an error a restart cannot
fix (the supervisor restarts on any other), see ``edge.process.FATAL_EXIT``."""
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def version() -> str:
    try:
        return metadata.version("xrmq")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xrmq", description="Actor runtime for XR conversational agents on a ZeroMQ bus."
    )
    parser.add_argument("--version", action="version", version=f"xrmq {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in _COMMAND_MODULES:
        importlib.import_module(module_name).add_commands(subparsers)
    for command in subparsers.choices.values():
        verbosity = command.add_mutually_exclusive_group()
        verbosity.add_argument(
            "-q", "--quiet", action="store_true", help="log problems only (ERROR)"
        )
        verbosity.add_argument(
            "-v",
            dest="verbosity",
            action="count",
            default=0,
            help="log more: INFO, or DEBUG with -vv (default: $XRMQ_LOG_LEVEL, else "
            "INFO for up/run/bus and WARNING for the rest)",
        )
    return parser


def log_level(
    command: str, quiet: bool, verbose: int, environ: dict[str, str] | os._Environ[str]
) -> str:
    """A command's log level: ``-q``/``-v``, else ``$XRMQ_LOG_LEVEL``, else its default."""
    if quiet:
        return "ERROR"
    if verbose:
        return "DEBUG" if verbose > 1 else "INFO"
    configured = environ.get("XRMQ_LOG_LEVEL", "").upper()
    if configured in _LEVELS:
        return configured
    return "INFO" if command in LONG_RUNNING else "WARNING"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = log_level(args.command, args.quiet, args.verbosity, os.environ)
    if args.quiet or args.verbosity:
        os.environ["XRMQ_LOG_LEVEL"] = level  # the processes this command starts follow the flag
    from xrmq.actors.runtime import configure_logging

    configure_logging(level=level)
    try:
        from xrmq.actors.edge.bus_commands import export_keys

        export_keys(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, TimeoutError, RuntimeError) as error:
        print(f"xrmq {args.command}: {error}", file=sys.stderr)
        if args.command in SUPERVISED:
            from xrmq.actors.edge.process import exit_code_for

            return exit_code_for(error)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as error:  # a file that cannot be read or written: no traceback
        where = f"{error.filename}: " if error.filename else ""
        print(f"xrmq {args.command}: {where}{error.strerror or error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
