"""``xrmq context dump|load|show|clear|compact``: a running edge box's participant context.

Each command joins the bus with a split ``ContextManager`` built from the config (the
same plan as the box's processes); it never calls ``close()`` (that would forget every
participant). A command about one participant (``show``, ``clear``, ``compact``) fetches
only that participant from every context process (``ContextManager.ensure``); ``dump``
and ``load`` start from every context process's snapshot (paged: any number of
participants fits the bus's message limit). On a CURVE bus it connects as identity
``xrmq-context`` by default (``--identity``), with the least privilege the manager needs
(``identities.CONTEXT_PERMISSIONS``).

- ``dump [--participant P] [--output FILE]``: the versioned dump (``ContextManager.dump``)
  on stdout or in FILE.
- ``load FILE``: merge a dump (by exchange identity: loading twice records nothing twice).
- ``show --participant P``: each section's size against its budget, then the context
  exactly as a prompt renders it.
- ``clear --participant P``: forget the participant everywhere (``forget.py``): a
  ``ParticipantLeft`` through the router, which forgets its turn history and focus and has
  every destination forget them (tools transcripts and their originals, realtime sessions
  and their checkpoints), confirmed by its ``ParticipantForgotten``; then the context
  sections of every replica, and their journal rows. Exit 1, naming what did not forget,
  when a destination failed or no router confirmed within ``--timeout``. A config without
  a router: the context is cleared directly, and the command says nothing else was asked.
- ``compact --participant P [--section S]``: compact now (``/compact``, docs/tools.md); exit
  1 when the model failed.
- ``compact --participant P --tier toolcall|summary [--destination NAME]``: compact the
  participant's tool transcript at a tools destination instead (docs/tools.md's ``/compact
  toolcall``; the destination defaults to the running box's only ``kind = "tools"`` one,
  as its supervisor tells (``BoxInfo``), else the config's); exit 1 when the destination
  did not answer.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO, TypeVar

from xrmq.actors.arguments import name, seconds
from xrmq.actors.context import ContextManager, utf8_size
from xrmq.actors.context.manual import CompactOutcome, CompactStatus
from xrmq.actors.edge.bus_commands import add_bus_argument
from xrmq.actors.runtime import Agent, AgentRuntime, run
from xrmq.actors.runtime.security.keys import client_credentials

from .boxinfo import BOX_INFO_WAIT_S, ask_box_info, tools_destination_of
from .config import EdgeConfig
from .config_loader import default_config, load_config
from .forget import ForgottenWaiter, failures, has_router
from .identities import CONTEXT_IDENTITY
from .stack import plan_of
from .tool_compaction import compact as compact_at

T = TypeVar("T")


def add_commands(subparsers: Any) -> None:
    context = subparsers.add_parser(
        "context", help="dump, load, show, clear or compact participant context"
    )
    commands = context.add_subparsers(dest="context_command", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        add_bus_argument(parser, identity=CONTEXT_IDENTITY)
        parser.add_argument(
            "--timeout", type=seconds, default=10.0, help="seconds to wait for the bus (default 10)"
        )

    dump = commands.add_parser("dump", help="write the context (of one participant) as a dump")
    common(dump)
    dump.add_argument("--participant", type=name, help="only this participant")
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
    show.add_argument("--participant", type=name, required=True)
    show.set_defaults(func=run_context)

    clear = commands.add_parser("clear", help="forget a participant's context")
    common(clear)
    clear.add_argument("--participant", type=name, required=True)
    clear.set_defaults(func=run_context)

    compact = commands.add_parser("compact", help="compact a participant's context now")
    common(compact)
    compact.add_argument("--participant", type=name, required=True)
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
    command = args.context_command
    if command == "dump":
        if args.output is None and sys.stdout.isatty():
            raise ValueError(
                "--output: a dump is binary (MessagePack), not for a terminal: give --output "
                "FILE or redirect stdout (`xrmq context show --participant P` prints text)"
            )
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
        waiter = ForgottenWaiter(source=CONTEXT_IDENTITY) if has_router(config) else None
        return run(
            with_manager(
                config,
                bus,
                lambda m: clear(m, args.participant, waiter=waiter, timeout=args.timeout),
                timeout=args.timeout,
                participant=args.participant,
                actors={} if waiter is None else {"forget": waiter},
            )
        )
    if args.tier is not None:
        if args.section is not None:
            raise ValueError("--section: a context section; --tier compacts a tool transcript")
        return run(
            compact_transcript(
                bus, args.participant, args.destination, args.tier, args.timeout, config=config
            )
        )
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
    named: str | None,
    tier: str,
    timeout: float,
    out: TextIO = sys.stdout,
    *,
    config: EdgeConfig,
) -> int:
    """One manual compaction of a tool transcript; 0 when the destination answered, else 1.

    The destination is ``named``, else the only tools destination of the running box (its
    ``BoxInfo``), else, when no supervisor answers, of ``config`` (``ValueError`` when there
    is not exactly one). A ``named`` one the box does not run as tools is refused at once
    (exit 1), not after ``timeout``.
    """
    async with AgentRuntime(
        bus, name="xrmq-context-compact", ready_timeout=min(timeout, 10.0)
    ) as runtime:
        box = await ask_box_info(runtime, timeout=min(timeout, BOX_INFO_WAIT_S))
        if named is None and box is None:
            named = tools_destination(config, None)
        elif named is None and box is not None:
            try:
                named = tools_destination_of(None, None, box.tools_destinations(), "the box's")
            except ValueError as error:
                raise ValueError(f"--destination: {error}") from None
        line = await compact_at(
            runtime,
            participant,
            f"/compact {tier} {named}",
            None,
            timeout=timeout,
            tools=None if box is None else box.tools_destinations(),
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
    actors: dict[str, Agent] | None = None,
) -> T:
    """Run ``use`` with a manager whose replica holds every context process's snapshot,
    or, given ``participant``, that participant only (fetched from every process); and
    ``actors`` registered on the same runtime."""
    manager = manager_for(config, snapshot_at_start=participant is None)
    credentials = client_credentials()  # on a CURVE bus the runtime's name is its identity's
    identity = CONTEXT_IDENTITY if credentials is None else credentials.identity
    runtime = AgentRuntime(bus, name=f"{identity}-{manager.id}", ready_timeout=timeout)
    runtime.register("context", manager.subscriber())
    for actor_name, actor in (actors or {}).items():
        runtime.register(actor_name, actor)
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


async def clear(
    manager: ContextManager,
    participant: str,
    out: TextIO = sys.stdout,
    *,
    waiter: ForgottenWaiter | None = None,
    timeout: float = 10.0,
    err: TextIO | None = None,
) -> int:
    """Forget ``participant`` through the router (``waiter``; None: the box has no router),
    then clear their context sections and journal rows; 1 when something did not forget."""
    missed: list[str] = []
    if waiter is not None:
        try:
            missed = failures(await waiter.forget(participant, timeout))
        except TimeoutError as error:
            missed = [f"router: {error} (its turn history and the destinations may keep them)"]
    await manager.clear(participant)
    if missed:
        print(
            f"xrmq context: cleared {participant}'s context, but not everywhere:",
            *missed,
            sep="\n  ",
            file=err or sys.stderr,
        )
        return 1
    if waiter is None:
        print(
            f"xrmq context: cleared {participant}'s context (the config runs no router: "
            "no destination was asked to forget them)",
            file=out,
        )
        return 0
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
