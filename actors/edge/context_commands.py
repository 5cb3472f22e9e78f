"""``xrmq context dump|load|show|clear|compact``: a running edge box's participant context.

Each command joins the bus with a split ``ContextManager`` built from the config (the
same plan as the box's processes); it never calls ``close()`` (that would forget every
participant). A command about one participant (``show``, ``clear``, ``compact``) fetches
only that participant from every context process (``ContextManager.ensure``); ``dump``
and ``load`` start from every context process's snapshot (paged: any number of
participants fits the bus's message limit). On a
CURVE bus it connects as identity ``xrmq-context`` by default (``--identity``), with the
least privilege the manager needs (``identities.CONTEXT_PERMISSIONS``).

- ``dump [--participant P] [--output FILE]``: the versioned dump (``ContextManager.dump``)
  on stdout or in FILE.
- ``load FILE``: merge a dump (by exchange identity: loading twice records nothing twice).
- ``show --participant P``: each section's size against its budget, then the context
  exactly as a prompt renders it.
- ``clear --participant P``: forget the participant (their journal rows go too).
- ``compact --participant P [--section S]``: compact now (``/compact``, docs/tools.md); exit
  1 when the model failed.
- ``compact --participant P --tier toolcall|summary [--destination NAME]``: compact the
  participant's tool transcript at a tools destination instead (docs/tools.md's ``/compact
  toolcall``; the destination defaults to the config's only ``kind = "tools"`` one); exit
  1 when the destination did not answer.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO, TypeVar

from xrmq.actors.context import ContextManager, utf8_size
from xrmq.actors.context.manual import CompactOutcome, CompactStatus
from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.runtime.commands import add_bus_argument
from xrmq.actors.runtime.security.keys import client_credentials

from .config import EdgeConfig, default_config, load_config
from .identities import CONTEXT_IDENTITY
from .stack import plan_of

T = TypeVar("T")


def add_commands(subparsers: Any) -> None:
    context = subparsers.add_parser(
        "context", help="dump, load, show, clear or compact participant context"
    )
    commands = context.add_subparsers(dest="context_command", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        add_bus_argument(parser, identity=CONTEXT_IDENTITY)
        parser.add_argument(
            "--timeout", type=float, default=10.0, help="seconds to wait for the bus (default 10)"
        )

    dump = commands.add_parser("dump", help="write the context (of one participant) as a dump")
    common(dump)
    dump.add_argument("--participant", help="only this participant")
    dump.add_argument("--output", help="write to this file instead of stdout")
    dump.set_defaults(func=run_context)

    load = commands.add_parser("load", help="merge a dump into the context")
    common(load)
    load.add_argument("file")
    load.set_defaults(func=run_context)

    show = commands.add_parser(
        "show", help="a participant's context as prompts render it, with sizes"
    )
    common(show)
    show.add_argument("--participant", required=True)
    show.set_defaults(func=run_context)

    clear = commands.add_parser("clear", help="forget a participant's context")
    common(clear)
    clear.add_argument("--participant", required=True)
    clear.set_defaults(func=run_context)

    compact = commands.add_parser("compact", help="compact a participant's context now")
    common(compact)
    compact.add_argument("--participant", required=True)
    compact.add_argument("--section", help="'dialogue' or an incremental topic (default: all)")
    compact.add_argument(
        "--tier",
        choices=("toolcall", "summary"),
        help="compact the tool transcript at a tools destination instead: toolcall reclaims "
        "old tool results (tier 1), summary summarizes (tier 2)",
    )
    compact.add_argument(
        "--destination",
        help="with --tier: the tools destination (default: the config's only tools destination)",
    )
    compact.set_defaults(func=run_context)


def run_context(args: argparse.Namespace) -> int:
    config = default_config() if args.config is None else load_config(args.config)
    bus = args.bus  # --bus, else the config's (``export_keys``)
    if args.timeout <= 0:
        raise ValueError("--timeout: must be > 0")
    command = args.context_command
    if command == "dump":
        return run(
            with_manager(
                config, bus, lambda m: dump(m, args.participant, args.output), timeout=args.timeout
            )
        )
    if command == "load":
        data = Path(args.file).read_bytes()
        return run(
            with_manager(config, bus, lambda m: load(m, data, args.file), timeout=args.timeout)
        )
    if command == "show":
        return run(
            with_manager(
                config,
                bus,
                lambda m: show(m, args.participant),
                timeout=args.timeout,
                participant=args.participant,
            )
        )
    if command == "clear":
        return run(
            with_manager(
                config,
                bus,
                lambda m: clear(m, args.participant),
                timeout=args.timeout,
                participant=args.participant,
            )
        )
    if args.tier is not None:
        if args.section is not None:
            raise ValueError("--section: a context section; --tier compacts a tool transcript")
        destination = tools_destination(config, args.destination)
        return run(compact_transcript(bus, args.participant, destination, args.tier, args.timeout))
    if args.destination is not None:
        raise ValueError("--destination: only with --tier (a tools destination's transcript)")
    return run(
        with_manager(
            config,
            bus,
            lambda m: compact(m, args.participant, args.section),
            timeout=args.timeout,
            participant=args.participant,
        )
    )


def tools_destination(config: EdgeConfig, named: str | None) -> str:
    """The tools destination ``--tier`` compacts at: ``named``, else the config's only one."""
    if named is not None:
        return named
    tools = [name for name, d in config.destinations.items() if d.kind == "tools"]
    if len(tools) != 1:
        found = ", ".join(tools) or "none"
        raise ValueError(
            f"--destination: name the tools destination (the config's tools destinations: {found})"
        )
    return tools[0]


async def compact_transcript(
    bus: str,
    participant: str,
    destination: str,
    tier: str,
    timeout: float,
    out: TextIO = sys.stdout,
) -> int:
    """One manual compaction of a tool transcript; 0 when the destination answered, else 1."""
    from .chat import compact as compact_at

    async with AgentRuntime(
        bus, name="xrmq-context-compact", ready_timeout=min(timeout, 10.0)
    ) as runtime:
        line = await compact_at(
            runtime, participant, f"/compact {tier} {destination}", None, timeout=timeout
        )
    print(line.removeprefix("xrmq chat: ").replace("/compact: ", ""), file=out, flush=True)
    return 1 if "/compact:" in line else 0


def manager_for(config: EdgeConfig, *, snapshot_at_start: bool = True) -> ContextManager:
    """A split manager with the plan of ``config``'s processes (it hosts nothing)."""
    plan = plan_of(config)
    return ContextManager(
        None,  # type: ignore[arg-type]  # a split manager calls no model: its workers do
        deployment="split",
        **config.context.manager_kwargs(),
        compaction_workers=plan.compaction_workers,
        section_hosts=plan.section_hosts,
        namespace=plan.namespace,
        snapshot_at_start=snapshot_at_start,
    )


async def with_manager(
    config: EdgeConfig,
    bus: str,
    use: Callable[[ContextManager], Awaitable[T]],
    *,
    timeout: float = 10.0,
    participant: str | None = None,
) -> T:
    """Run ``use`` with a manager whose replica holds every context process's snapshot,
    or, given ``participant``, that participant only (fetched from every process)."""
    manager = manager_for(config, snapshot_at_start=participant is None)
    credentials = client_credentials()  # on a CURVE bus the runtime's name is its identity's
    identity = CONTEXT_IDENTITY if credentials is None else credentials.identity
    runtime = AgentRuntime(bus, name=f"{identity}-{manager.id}", ready_timeout=timeout)
    runtime.register("context", manager.subscriber())
    async with runtime:
        hosts = manager.plan.section_hosts
        if participant is not None:
            if not await manager.ensure(participant):
                raise RuntimeError(
                    f"a context process did not answer on {bus} for participant "
                    f"{participant!r} (is `xrmq up` running with this config?)"
                )
        elif manager.resyncs < hosts:
            raise RuntimeError(
                f"{hosts - manager.resyncs} of {hosts} context process(es) did not answer on {bus} "
                "(is `xrmq up` running with this config?)"
            )
        return await use(manager)


async def dump(
    manager: ContextManager,
    participant: str | None,
    output: str | None,
    stdout: BinaryIO | None = None,
) -> int:
    data = await manager.dump(participant)
    if output is not None:
        Path(output).write_bytes(data)
    else:
        stream = stdout or sys.stdout.buffer
        stream.write(data)
        stream.flush()
    return 0


async def load(manager: ContextManager, data: bytes, name: str, out: TextIO = sys.stdout) -> int:
    sections = await manager.load(data)
    print(f"xrmq context: loaded {sections} section(s) from {name}", file=out)
    return 0


async def show(manager: ContextManager, participant: str, out: TextIO = sys.stdout) -> int:
    from xrmq.actors.conversation import context_message

    config = manager.plan.config
    await manager.ensure(participant)  # held whole even past the replica's bound
    sections = manager.section_blocks(participant)
    for section in config.sections:
        name = section.spec.name
        size = sum(utf8_size(block.text) for block in sections.get(name, ()))
        print(f"{name} ({section.spec.kind}): {size} / {section.spec.budget_bytes} bytes", file=out)
    blocks = manager.blocks(participant)
    print(
        f"-- the context of {participant} as a prompt renders it "
        f"({sum(utf8_size(b.text) for b in blocks)} bytes in {len(blocks)} blocks)",
        file=out,
    )
    print(context_message(blocks, time.time_ns() // 1000), file=out)
    return 0


async def clear(manager: ContextManager, participant: str, out: TextIO = sys.stdout) -> int:
    await manager.clear(participant)
    print(f"xrmq context: cleared {participant}", file=out)
    return 0


async def compact(
    manager: ContextManager, participant: str, section: str | None, out: TextIO = sys.stdout
) -> int:
    outcome: CompactOutcome = await manager.compact(participant, section)
    print(outcome.message(), file=out)
    return 1 if outcome.status is CompactStatus.SUMMARIZE_FAILED else 0


async def compact_in_chat(config: EdgeConfig, bus: str, participant: str, argument: str) -> str:
    """``/compact [SECTION]`` in ``xrmq chat``: compact the participant's context now."""
    try:
        outcome = await with_manager(
            config,
            bus,
            lambda m: m.compact(participant, argument.strip() or None),
            participant=participant,
        )
    except (ValueError, TimeoutError, RuntimeError) as error:
        return f"/compact: {error}"
    return outcome.message()
