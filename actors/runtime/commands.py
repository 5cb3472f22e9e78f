"""Bus-level commands: ``xrmq bus``, ``xrmq publish``, ``xrmq schema``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from xrmq.schemas import ConversationContextUpdate, MessageMetadata, UserQuery
from xrmq.topics import STANDARD_TOPICS, Topic, context_topic

from .address import DEFAULT_BUS, parse_bus
from .broker import Broker
from .loop import run
from .runtime import AgentRuntime


def default_bus() -> str:
    """The bus commands use unless ``--bus`` says otherwise: ``$XRMQ_BUS`` or ``default``."""
    return os.environ.get("XRMQ_BUS", DEFAULT_BUS)


def add_bus_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bus",
        default=default_bus(),
        help="bus name, ipc://PREFIX, tcp://HOST:PORT (default: $XRMQ_BUS or 'default')",
    )


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
    add_bus_argument(bus)
    bus.add_argument("--no-capture", action="store_true", help="do not bind the capture socket")
    bus.set_defaults(func=run_bus)

    publish = subparsers.add_parser(
        "publish", help="publish one message (a query or a context update)"
    )
    add_bus_argument(publish)
    publish.add_argument(
        "topic", help="topic name: a standard topic, or any other name for a context topic"
    )
    publish.add_argument("content", help="text, or a JSON object with the payload's fields")
    publish.add_argument("--participant", help="participant id (omit for a global message)")
    publish.add_argument("--source", default="application", help="source name in the envelope")
    publish.set_defaults(func=run_publish)

    schema = subparsers.add_parser(
        "schema", help="print the JSON Schema of the envelope and every standard topic"
    )
    schema.set_defaults(func=run_schema)


def run_bus(args: argparse.Namespace) -> int:
    address = parse_bus(args.bus)
    broker = Broker(address, capture=not args.no_capture)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    broker.start()
    print(
        f"xrmq bus: ready publish={address.publish} subscribe={address.subscribe}"
        + (f" capture={address.capture}" if broker.capture else ""),
        flush=True,
    )
    stop.wait()
    broker.stop()
    return 0


def topic_for(name: str) -> Topic:
    """A standard topic by name, else the context topic of that name."""
    for topic in STANDARD_TOPICS:
        if topic.name == name:
            return topic
    return context_topic(name)


def parse_content(topic: Topic, content: str) -> Any:
    """Build the payload from text or a JSON object; ``ValueError`` naming the rule."""
    stripped = content.lstrip()
    if stripped.startswith("{"):
        try:
            return msgspec.json.decode(content.encode(), type=topic.message_type)
        except msgspec.ValidationError as error:
            raise ValueError(f"content: {error}") from None
        except msgspec.DecodeError as error:
            raise ValueError(f"content: invalid JSON: {error}") from None
    if topic.message_type is UserQuery:
        return UserQuery(content, time.time_ns() // 1000)
    if topic.message_type is ConversationContextUpdate:
        return ConversationContextUpdate(content)
    raise ValueError(
        f"content: topic {topic.name!r} needs a JSON object of {topic.message_type.__name__} fields"
    )


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
