"""Edge-box commands: ``xrmq up``, ``xrmq run``, ``xrmq record``, ``xrmq replay``, ``xrmq echo``,
``xrmq topics``, ``xrmq capture show``, ``xrmq top``, ``xrmq demo``, ``xrmq chat``, ``xrmq say``,
``xrmq context ...`` (``context_commands``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xrmq.actors.arguments import count, name, participant, seconds, topic_globs, words
from xrmq.actors.edge.bus_commands import IDENTITY_ENV, add_bus_argument, require_broker
from xrmq.actors.runtime import run
from xrmq.actors.runtime.address import is_loopback_tcp

from .config import EdgeConfig, describe_defaulted
from .config_loader import default_config, load_config

if TYPE_CHECKING:
    from .topictools import TopicView


def add_commands(subparsers: Any) -> None:
    up = subparsers.add_parser(
        "up", help="start the broker and every process of an edge-box config, supervised"
    )
    up.add_argument(
        "config",
        nargs="?",
        help="TOML config (default: the built-in default; see examples/edge-box.toml)",
    )
    up.add_argument(
        "--check",
        action="store_true",
        help="validate the config and its roles, check the bus is free; start nothing",
    )
    up.add_argument(
        "--init-keys",
        action="store_true",
        help="with [bus.security] mode = 'curve': create missing key pairs (broker, processes)",
    )
    up.add_argument(
        "--print-systemd",
        action="store_true",
        help="print one systemd unit per process of CONFIG (and xrmq.target), start nothing",
    )
    up.set_defaults(func=run_up)

    run = subparsers.add_parser(
        "run", help="run one process of an edge-box config (what 'up' starts)"
    )
    run.add_argument(
        "target",
        metavar="ROLE-or-PROCESS",
        help="a process named in the config, or a role to run alone",
    )
    run.add_argument("--config", help="TOML config (default: the built-in default)")
    run.add_argument(
        "--shard", type=int, default=0, help="which replica of the process (default 0)"
    )
    run.set_defaults(func=run_run)

    record = subparsers.add_parser("record", help="write the broker's capture stream to a file")
    add_bus_argument(record)
    record.add_argument("file")
    record.add_argument("--count", type=count, help="stop after this many messages")
    record.add_argument("--duration", type=seconds, help="stop after this many seconds")
    record.add_argument(
        "--topic",
        type=topic_globs,
        action="extend",
        default=[],
        metavar="PATTERN",
        help="record only topics matching this glob (repeatable, or a comma list; default: "
        "every topic)",
    )
    record.set_defaults(func=run_record)

    replay = subparsers.add_parser(
        "replay", help="publish a recorded capture file onto a bus, in order and pace"
    )
    add_bus_argument(replay)
    replay.add_argument("file")
    replay.add_argument(
        "--speed", type=float, default=1.0, help="pace factor: 2 is twice as fast, inf back to back"
    )
    replay.add_argument(
        "--only",
        type=topic_globs,
        action="extend",
        default=[],
        metavar="PATTERN",
        help="replay only topics matching this glob (repeatable, or a comma list; default: every "
        "topic but those the box derives: its internal topics, voice.output, voice.turn_ended)",
    )
    replay.add_argument(
        "--exclude",
        type=topic_globs,
        action="extend",
        default=[],
        metavar="PATTERN",
        help="also leave out topics matching this glob (repeatable, or a comma list)",
    )
    replay.set_defaults(func=run_replay)

    echo = subparsers.add_parser("echo", help="print every message of one topic as it arrives")
    add_bus_argument(echo)
    echo.add_argument(
        "topic", type=name, help="topic name (standard topics are decoded with their schema)"
    )
    echo.add_argument("--participant", type=participant, help="only this participant's messages")
    echo.add_argument("--json", action="store_true", help="one JSON object per line")
    echo.add_argument("--count", type=count, help="stop after this many messages")
    echo.set_defaults(func=run_echo)

    topics = subparsers.add_parser(
        "topics", help="topics seen on the bus: messages, rates, publishers, participants"
    )
    add_bus_argument(topics)
    topics.add_argument("--window", type=seconds, default=3.0, help="seconds to watch (default 3)")
    add_view_arguments(topics)
    topics.set_defaults(func=run_topics)

    capture = subparsers.add_parser("capture", help="work with recordings of 'xrmq record'")
    capture_commands = capture.add_subparsers(dest="capture_command", required=True)
    show = capture_commands.add_parser("show", help="print a recording, one message per line")
    show.add_argument("file")
    show.add_argument("--json", action="store_true", help="one JSON object per line")
    add_view_arguments(show)
    show.set_defaults(func=run_capture_show)

    top = subparsers.add_parser(
        "top", help="live view of every runtime: actors, mailboxes, rates, gaps, gauges"
    )
    add_bus_argument(top)
    top.add_argument("--once", action="store_true", help="print one view and exit")
    top.add_argument("--json", action="store_true", help="print the rows as JSON")
    top.add_argument(
        "--interval", type=seconds, default=1.0, help="seconds between redraws (default 1)"
    )
    top.add_argument(
        "--window",
        type=seconds,
        default=3.0,
        help="with --once: wait at most this long for reports",
    )
    top.add_argument(
        "--expect",
        type=count,
        help="with --once: print as soon as this many runtimes reported twice",
    )
    top.set_defaults(func=run_top)

    demo = subparsers.add_parser(
        "demo", help="a scripted two-participant session on an edge stack it starts itself"
    )
    demo.add_argument(
        "--verbose",
        action="store_true",
        help="also print every line of the stack's processes (stderr)",
    )
    demo.add_argument(
        "--voice",
        action="store_true",
        help="spoken questions (espeak-ng) as audio in, answers as audio out (the voice extra)",
    )
    demo.add_argument(
        "--realtime",
        action="store_true",
        help="a spoken realtime session on the offline realtime server that rolls over and "
        "still recalls the first fact (the realtime and voice extras)",
    )
    demo.set_defaults(func=run_demo)

    chat = subparsers.add_parser(
        "chat", help="interactive text front end: type queries, read the streamed replies"
    )
    add_bus_argument(chat)
    chat.add_argument(
        "--participant", type=name, default="p1", help="participant id (default: %(default)s)"
    )
    chat.add_argument(
        "--private-stack",
        "--embedded",
        dest="private_stack",
        action="store_true",
        help="start an edge stack of the built-in default on a private bus instead of using "
        "--bus (--embedded: its former name)",
    )
    chat.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        help="seconds to wait for each reply (default: the --config's model timeout + 10)",
    )
    chat.set_defaults(func=run_chat)

    say = subparsers.add_parser("say", help="ask one query, print the reply, exit")
    add_bus_argument(say)
    say.add_argument("text", type=words)
    say.add_argument(
        "--participant", type=name, default="p1", help="participant id (default: %(default)s)"
    )
    say.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        help="seconds to wait for the whole reply (default: the --config's model timeout + 10)",
    )
    say.set_defaults(func=run_say)


def _config(path: str | None) -> EdgeConfig:
    return default_config() if path is None else load_config(path)


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    """``--all``, ``--topic`` and ``--participant`` of ``topics`` and ``capture show``
    (``topictools.TopicView``)."""
    parser.add_argument(
        "--all",
        action="store_true",
        help="also show internal topics (_inbox.*, _probe.*, xrmq.*, route.*, context.*, "
        "tools.*, *.transcript.*: xrmq.topics.INTERNAL_TOPICS)",
    )
    parser.add_argument(
        "--topic",
        type=topic_globs,
        action="extend",
        default=[],
        metavar="GLOB",
        help="only topics matching this fnmatch glob (repeatable, or a comma list)",
    )
    parser.add_argument("--participant", type=participant, help="only this participant's messages")


def _view(args: argparse.Namespace) -> TopicView:
    from .topictools import TopicView

    return TopicView(tuple(args.topic), args.participant, args.all)


def run_up(args: argparse.Namespace) -> int:
    from .checks import check_bus_free, check_can_answer, unanswered_model_endpoints
    from .roles import check_roles

    config = _config(args.config)
    check_roles(config)
    check_can_answer(config)
    security = config.bus.security
    if security.mode == "curve":
        from .identities import broker_security, init_keys, keys_dir

        if args.init_keys:
            created = init_keys(config)
            if created:
                print(f"xrmq up: created key pairs in {keys_dir(config)}: {', '.join(created)}")
        identities = len(broker_security(config).identities)  # every key it needs is there
        posture = f"bus security curve, {identities} identities"
    else:
        if args.init_keys:
            raise ValueError("--init-keys: the config's [bus.security] mode is not 'curve'")
        posture = "bus security none"
        if security.insecure and is_loopback_tcp(config.bus.address) is False:
            posture += (
                f"; WARNING: insecure = true: {config.bus.address} is open to anyone who reaches it"
            )
    if args.print_systemd:
        from .systemd import render_units, systemd_units

        if args.config is None:
            raise ValueError(
                "--print-systemd: name the CONFIG file the units run (e.g. examples/edge-box.toml)"
            )
        print(render_units(systemd_units(config, args.config)), end="")
        return 0
    check_bus_free(config)  # what `xrmq up` would refuse, --check refuses too
    defaulted = describe_defaulted(config)
    if defaulted is not None:
        print(f"xrmq up: {config.source}: {defaulted}", flush=True)
    if args.check:
        print(f"xrmq up: {config.source}: ok ({len(config.processes)} processes; {posture})")
        return 0
    for warning in unanswered_model_endpoints(config):  # the box starts all the same
        print(f"xrmq up: WARNING: {warning}", flush=True)
    from .process import exit_process

    exit_process(run(_supervise(config, args.config)))  # every child is gone: no teardown needed


async def _supervise(config: EdgeConfig, path: str | None) -> int:
    from .supervisor import Supervisor

    return await Supervisor(config, path).run()


def run_run(args: argparse.Namespace) -> int:
    from .process import exit_process, run_process, select_instance

    config = _config(args.config)
    instance = select_instance(config, args.target, args.shard)
    run(run_process(config, instance))
    exit_process(0)


def run_record(args: argparse.Namespace) -> int:
    from .capture import record

    require_broker(args.bus, endpoint="capture")
    from .topicfilter import TopicFilter

    return record(
        args.bus,
        args.file,
        count=args.count,
        duration=args.duration,
        out=sys.stdout,
        topics=TopicFilter(tuple(args.topic)),
    )


def run_replay(args: argparse.Namespace) -> int:
    from .capture import replay

    if not Path(args.file).is_file():
        raise ValueError(f"{args.file}: no such recording (make one with `xrmq record FILE`)")
    require_broker(args.bus, endpoint="publish")
    from xrmq.actors.runtime.security.keys import client_credentials

    from .topicfilter import replay_filter

    permissions = None
    credentials = client_credentials()
    if credentials is not None and args.config is not None:  # refuse what it may not publish
        from xrmq.actors.runtime.security.acl import Permissions

        from .identities import permissions as granted

        permissions = granted(load_config(args.config)).get(credentials.identity, Permissions())
    return replay(
        args.bus,
        args.file,
        speed=args.speed,
        out=sys.stdout,
        topics=replay_filter(args.only, args.exclude),
        permissions=permissions,
    )


def run_echo(args: argparse.Namespace) -> int:
    from .topictools import echo

    require_broker(args.bus)
    return echo(
        args.bus,
        args.topic,
        participant=args.participant,
        as_json=args.json,
        out=sys.stdout,
        count=args.count,
    )


def run_topics(args: argparse.Namespace) -> int:
    from .topictools import topics

    require_broker(args.bus, endpoint="capture")
    return topics(args.bus, window=args.window, out=sys.stdout, view=_view(args))


def run_capture_show(args: argparse.Namespace) -> int:
    from .topictools import show

    if not Path(args.file).is_file():
        raise ValueError(f"{args.file}: no such recording (make one with `xrmq record FILE`)")
    return show(args.file, as_json=args.json, out=sys.stdout, err=sys.stderr, view=_view(args))


def run_top(args: argparse.Namespace) -> int:
    from .top import watch

    require_broker(args.bus)
    return run(
        watch(
            args.bus,
            once=args.once,
            as_json=args.json,
            interval=args.interval,
            window=args.window,
            expect=args.expect,
            turns=_may_read_turns(args),
        )
    )


def _may_read_turns(args: argparse.Namespace) -> bool:
    """Whether ``top`` subscribes to ``xrmq.turns`` (its conversation pane): on a plain bus
    always; on a CURVE bus only when ``--config`` grants its identity the topic, since a
    subscription the broker refuses would keep ``top`` from starting at all."""
    import os

    from xrmq.actors.runtime.security.acl import Patterns
    from xrmq.actors.runtime.security.keys import KEY_ENV
    from xrmq.topics import TURNS_TOPIC

    from .identities import permissions

    if not os.environ.get(KEY_ENV):
        return True
    if args.config is None:
        return False
    identity = args.identity or os.environ.get(IDENTITY_ENV) or args.default_identity
    granted = permissions(load_config(args.config)).get(identity or "")
    return granted is not None and TURNS_TOPIC.name in Patterns(granted.subscribe)


def run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo as demo

    if getattr(args, "voice", False) and getattr(args, "realtime", False):
        raise ValueError("--voice and --realtime: choose one demo")
    if getattr(args, "realtime", False):
        from .realtime_demo import run_realtime_demo  # checks the extras itself

        return run(run_realtime_demo(sys.stdout, verbose=args.verbose))
    if getattr(args, "voice", False):
        from .voice_requirements import missing

        absent = missing()
        if absent:
            raise RuntimeError("--voice needs " + "; ".join(absent))
        from .voice_demo import run_voice_demo  # the voice extra

        return run(run_voice_demo(sys.stdout, verbose=args.verbose))
    return run(demo(sys.stdout, verbose=args.verbose))


def _reply_wait(args: argparse.Namespace) -> None:
    """``--timeout``'s default: the box's model timeout and a margin (``reply_wait_s``), so
    the box reports a stalled model before the client gives up."""
    if args.timeout is None:
        from .config import reply_wait_s

        private = getattr(args, "private_stack", False)
        args.timeout = reply_wait_s(default_config() if private else _config(args.config))


def run_chat(args: argparse.Namespace) -> int:
    from .chat import chat, chat_private_stack

    _reply_wait(args)
    if args.private_stack:
        return run(chat_private_stack(args.participant, timeout=args.timeout))
    require_broker(args.bus)
    config = None if args.config is None else load_config(args.config)
    return run(
        chat(
            args.bus,
            args.participant,
            timeout=args.timeout,
            config=config,
            router_silence_s=_router_watch(args, config),
        )
    )


def run_say(args: argparse.Namespace) -> int:
    from .chat import say

    follow_box = args.timeout is None and args.config is None  # nothing said: the box's
    _reply_wait(args)
    require_broker(args.bus)
    config = None if args.config is None else load_config(args.config)
    return run(
        say(
            args.bus,
            args.participant,
            args.text,
            timeout=args.timeout,
            router_silence_s=_router_watch(args, config),
            follow_box=follow_box,
        )
    )


def _router_watch(args: argparse.Namespace, config: EdgeConfig | None) -> float | None:
    """How long a client waits for a silent router (``ReplyCollector.router_silence_s``).

    The watch reads the router's heartbeats on ``xrmq.metrics``. On a plain bus anyone
    may; on a CURVE bus only an identity whose table grants it (heartbeats name every
    stream's key, so an identity bound to participants is not given it): there, without
    that grant (or without ``--config`` to tell), the client goes without the watch rather
    than failing to start.
    """
    import os

    from xrmq.actors.runtime.security.acl import Patterns
    from xrmq.actors.runtime.security.keys import KEY_ENV
    from xrmq.topics import METRICS_TOPIC

    from .identities import permissions
    from .replies import ROUTER_SILENCE_S

    if not os.environ.get(KEY_ENV):
        return ROUTER_SILENCE_S
    if config is None:
        return None
    identity = args.identity or os.environ.get(IDENTITY_ENV) or args.default_identity
    granted = permissions(config).get(identity or "")
    if granted is None or METRICS_TOPIC.name not in Patterns(granted.subscribe):
        return None
    return ROUTER_SILENCE_S
