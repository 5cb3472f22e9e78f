"""Bus-level commands: ``xrmq bus``, ``xrmq publish``, ``xrmq schema``, ``xrmq keys``.

The app's side of the bus: argument parsing, the box's config and identities (``--config``,
``--identity``), and the broker as a process. Each ``add_commands`` is listed in
``xrmq.actors.cli``; the text-to-message helpers ``xrmq publish`` shares with the
``Publisher`` are the kernel's (``xrmq.actors.runtime.content``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec

from xrmq.actors.arguments import name, utf8
from xrmq.actors.runtime import DEFAULT_BUS, AgentRuntime, get_logger, parse_bus, run
from xrmq.actors.runtime.address import is_loopback_tcp
from xrmq.actors.runtime.broker import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_SUBSCRIBER_BUDGET_BYTES,
    Broker,
)
from xrmq.actors.runtime.content import parse_content, topic_for
from xrmq.actors.runtime.security.forwarder import BrokerSecurity, Rescan
from xrmq.actors.runtime.security.keys import (
    KEY_ENV,
    SECRET_SUFFIX,
    SERVER_KEY_ENV,
    create_keypair,
    list_keys,
    require_curve,
)
from xrmq.schemas import ConversationContextUpdate, MessageMetadata
from xrmq.topics import STANDARD_TOPICS, Topic


def default_bus() -> str:
    """The bus commands use unless ``--bus`` says otherwise: ``$XRMQ_BUS`` or ``default``."""
    return os.environ.get("XRMQ_BUS", DEFAULT_BUS)


CONFIG_ENV = "XRMQ_CONFIG"
IDENTITY_ENV = "XRMQ_IDENTITY"


def add_bus_argument(
    parser: argparse.ArgumentParser, *, keys: bool = True, identity: str | None = None
) -> None:
    """``--bus``, and for a client of the bus (``keys``) ``--config``, ``--identity``, ``--key``
    and ``--server-key`` (resolved by ``export_keys``); ``identity`` is the command's
    default identity on a CURVE bus of the config (None: the user names one)."""
    if not keys:
        parser.add_argument(
            "--bus",
            default=default_bus(),
            help="bus name, ipc://PREFIX, tcp://HOST:PORT (default: $XRMQ_BUS or 'default')",
        )
        return
    parser.add_argument(
        "--bus",
        default=None,
        help="bus name, ipc://PREFIX, tcp://HOST:PORT (default: the --config's "
        "bus, else $XRMQ_BUS or 'default')",
    )
    parser.add_argument(
        "--config",
        default=os.environ.get(CONFIG_ENV) or None,
        help=f"the edge box's TOML config: its bus, and on a CURVE bus the "
        f"broker's public key and --identity's key (default: ${CONFIG_ENV})",
    )
    default = (
        f" (default: ${IDENTITY_ENV}, else {identity!r})"
        if identity
        else (f" (default: ${IDENTITY_ENV})")
    )
    parser.add_argument(
        "--identity",
        metavar="NAME",
        help="CURVE bus of --config: connect as NAME, with the key pair "
        f"<keys>/NAME.key_secret{default}",
    )
    parser.add_argument(
        "--key",
        metavar="FILE",
        help=f"CURVE bus: this client's NAME.key_secret (default: ${KEY_ENV}, "
        "else --identity's in --config)",
    )
    parser.add_argument(
        "--server-key",
        metavar="FILE",
        help=f"CURVE bus: the broker's public key file "
        f"(default: ${SERVER_KEY_ENV}, else the one of --config)",
    )
    parser.set_defaults(client_of_bus=True, default_identity=identity)


def export_keys(args: argparse.Namespace) -> None:
    """Resolve a bus client's ``--bus`` and CURVE credentials, and make the credentials the
    process's ``$XRMQ_KEY``/``$XRMQ_SERVER_KEY``.

    Every runtime and socket a command opens takes its CURVE credentials from there. The
    order, for each: the option, the environment variable, then ``--config`` (its bus;
    on a ``mode = "curve"`` bus the broker's public key file next to its secret one and
    the identity's ``<keys>/NAME.key_secret``, NAME from ``--identity``,
    ``$XRMQ_IDENTITY`` or the command's own default identity).
    """
    if getattr(args, "client_of_bus", False):
        _resolve_client(args)
    for option, variable in (("key", KEY_ENV), ("server_key", SERVER_KEY_ENV)):
        value = getattr(args, option, None)
        if value is not None:
            os.environ[variable] = str(value)


def _resolve_client(args: argparse.Namespace) -> None:
    if args.config is not None:
        from xrmq.actors.edge.config_loader import load_config  # the config file is the edge box's
        from xrmq.actors.edge.identities import broker_public_file, keys_dir

        config = load_config(args.config)
        if args.bus is None:
            args.bus = config.bus.address
        if config.bus.security.mode == "curve":
            if args.server_key is None and not os.environ.get(SERVER_KEY_ENV):
                args.server_key = str(broker_public_file(config))
            if args.key is None and not os.environ.get(KEY_ENV):
                name = args.identity or os.environ.get(IDENTITY_ENV) or args.default_identity
                if not name:
                    raise ValueError(
                        f"--identity: {args.config} is a CURVE bus: name the identity to connect "
                        f"as (--identity NAME or ${IDENTITY_ENV}: its key pair "
                        f"{keys_dir(config)}/NAME.key_secret), or give --key FILE"
                    )
                args.key = str(keys_dir(config) / f"{name}{SECRET_SUFFIX}")
    elif args.identity is not None:
        raise ValueError(
            "--identity: needs --config (or $XRMQ_CONFIG): the config names the keys directory"
        )
    if args.bus is None:
        args.bus = default_bus()


def require_broker(bus: str, *, endpoint: str = "subscribe") -> None:
    """Fail at once when an ipc bus's socket file is missing: no broker serves it.

    ``ValueError`` naming the file and ``xrmq up``, instead of a wait for a readiness
    probe that cannot come back. ``endpoint`` is the one the command connects to
    (``publish``, ``subscribe`` or ``capture``); tcp buses are not checked.
    """
    socket = getattr(parse_bus(bus), endpoint)
    if socket.startswith("ipc://") and not Path(socket[len("ipc://") :]).exists():
        raise ValueError(
            f"no broker serves bus {bus!r} ({socket[len('ipc://') :]} does not exist): "
            "start the edge box with `xrmq up` (or a broker with `xrmq bus`)"
        )


def add_commands(subparsers: Any) -> None:
    bus = subparsers.add_parser("bus", help="run the bus broker (XSUB/XPUB proxy with capture)")
    add_bus_argument(bus, keys=False)
    bus.add_argument("--no-capture", action="store_true", help="do not bind the capture socket")
    bus.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="ZMQ_MAXMSGSIZE: a larger frame drops its publisher's connection",
    )
    bus.add_argument(
        "--subscriber-budget-bytes",
        type=int,
        default=DEFAULT_SUBSCRIBER_BUDGET_BYTES,
        help="bytes stalled subscribers may cost the broker (past it, one is disconnected)",
    )
    bus.add_argument(
        "--metrics-interval",
        type=float,
        default=None,
        help="publish the broker's heartbeat (dropped connections) every N seconds",
    )
    bus.add_argument("--config", help="edge-box TOML whose [bus.security] the broker enforces")
    bus.add_argument(
        "--insecure",
        action="store_true",
        help="allow a plain tcp bus beyond loopback (anyone who reaches it owns it)",
    )
    bus.set_defaults(func=run_bus)

    keys = subparsers.add_parser("keys", help="CURVE key pairs for a secure bus")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    new = keys_commands.add_parser("new", help="write NAME.key and NAME.key_secret (mode 0600)")
    new.add_argument("name", help="the identity's name (the file names)")
    new.add_argument("--dir", default=".", help="directory to write them in (default: here)")
    new.set_defaults(func=run_keys_new)
    listing = keys_commands.add_parser("list", help="the public keys in a directory")
    listing.add_argument("dir")
    listing.set_defaults(func=run_keys_list)

    publish = subparsers.add_parser(
        "publish", help="publish one message (a query or a context update)"
    )
    add_bus_argument(publish)
    publish.add_argument(
        "topic",
        type=name,
        help="topic name: a standard topic, or any other name for a context topic",
    )
    publish.add_argument(
        "content", type=utf8, help="text, or a JSON object with the payload's fields"
    )
    publish.add_argument(
        "--participant", type=name, help="participant id (omit for a global message)"
    )
    publish.add_argument("--source", default="application", help="source name in the envelope")
    publish.set_defaults(func=run_publish)

    schema = subparsers.add_parser(
        "schema", help="print the JSON Schema of the envelope and every standard topic"
    )
    schema.set_defaults(func=run_schema)


def run_bus(args: argparse.Namespace) -> int:
    address = parse_bus(args.bus)
    security: BrokerSecurity | None = None
    rescan: Rescan | None = None
    rescan_interval = 1.0
    if args.config is not None:
        from xrmq.actors.edge.config_loader import load_config  # the config file is the edge box's
        from xrmq.actors.edge.identities import KeyRescan, broker_security

        config = load_config(args.config)
        if config.bus.security.mode == "curve":
            require_curve()
            security = broker_security(config)
            rescan = KeyRescan(config, get_logger(component="broker"))
            rescan_interval = config.bus.security.rescan_s
        args.insecure = args.insecure or config.bus.security.insecure
    if security is None and is_loopback_tcp(args.bus) is False and not args.insecure:
        raise ValueError(
            f"--bus: {args.bus!r} binds tcp beyond loopback without security: anyone "
            "who can reach it owns the bus; give --config with [bus.security] "
            'mode = "curve" (or --insecure to accept that)'
        )
    broker = Broker(
        address,
        capture=not args.no_capture,
        max_message_bytes=args.max_message_bytes,
        subscriber_budget_bytes=args.subscriber_budget_bytes,
        metrics_interval=args.metrics_interval,
        security=security,
        rescan=rescan,
        rescan_interval=rescan_interval,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    broker.start()
    print(
        f"xrmq bus: ready publish={address.publish} subscribe={address.subscribe}"
        + (f" capture={address.capture}" if broker.capture else "")
        + (f" security=curve identities={len(security.identities)}" if security else ""),
        flush=True,
    )
    stop.wait()
    broker.stop()
    return 0


KNOWN_CONTEXT_TOPICS = ("scene", "notes")
"""The context topics of the built-in default config (``xrmq up`` without a file)."""
GLOBAL_TOPICS = frozenset({"xrmq.metrics"})
"""Standard topics whose messages concern no participant."""


def publish_warnings(topic: Topic, participant: str | None) -> list[str]:
    """What ``xrmq publish`` warns about before publishing: a topic nothing configured reads
    (a typo?), a participant-scoped topic without ``--participant``."""
    warnings = []
    standard = any(topic.name == known.name for known in STANDARD_TOPICS)
    if not standard and topic.name not in KNOWN_CONTEXT_TOPICS:
        warnings.append(
            f"{topic.name!r} is neither a standard topic nor a context topic of the default config "
            f"({', '.join(KNOWN_CONTEXT_TOPICS)}): only a box configured with it reads it"
        )
    if participant is None and topic.name not in GLOBAL_TOPICS:
        warnings.append(
            f"no --participant: {topic.name!r} is participant-scoped, so no participant's "
            "context or turn receives a global message"
        )
    return warnings


def run_publish(args: argparse.Namespace) -> int:
    """Publish one message and print its topic, participant and message id (warnings on stderr)."""
    topic = topic_for(args.topic)
    message = parse_content(topic, args.content)
    for warning in publish_warnings(topic, args.participant):
        print(f"xrmq publish: warning: {warning}", file=sys.stderr, flush=True)
    require_broker(args.bus, endpoint="publish")

    async def publish() -> str:
        async with AgentRuntime(args.bus, ready_timeout=5.0) as runtime:
            return runtime.send(topic, message, participant_id=args.participant, source=args.source)

    message_id = run(publish())
    print(
        f"xrmq publish: {topic.name} participant={args.participant or '-'} message_id={message_id}",
        flush=True,
    )
    return 0


def schemas() -> dict[str, Any]:
    """JSON Schema of the envelope and of each standard topic's payload, by name."""
    types = [
        MessageMetadata,
        *(topic.message_type for topic in STANDARD_TOPICS),
        ConversationContextUpdate,
    ]
    (refs, components) = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    topics = {topic.name: refs[i + 1] for i, topic in enumerate(STANDARD_TOPICS)}
    topics["<context topic>"] = refs[-1]
    return {"envelope": refs[0], "topics": topics, "$defs": components}


def run_schema(args: argparse.Namespace) -> int:
    json.dump(schemas(), sys.stdout, indent=2)
    print()
    return 0


def run_keys_new(args: argparse.Namespace) -> int:
    public, secret = create_keypair(args.name, args.dir)
    print(
        f"xrmq keys: wrote {public} (for the broker's authorized directory) "
        f"and {secret} (mode 0600)"
    )
    return 0


def run_keys_list(args: argparse.Namespace) -> int:
    for info in list_keys(args.dir):
        print(f"{info.name}\t{info.public_key}\t{'pair' if info.has_secret else 'public only'}")
    return 0
