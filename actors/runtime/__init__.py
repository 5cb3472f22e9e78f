"""The actor runtime: bus addresses, broker, agents, mailboxes and AgentRuntime."""

from xrmq.actors.logs import configure_logging, get_logger

from .address import DEFAULT_BUS, BusAddress, parse_bus, runtime_dir
from .agent import Agent, AgentHost, Handler, Handlers, RuntimeContext, subscribe
from .asks import DEFERRED_REPLY
from .broker import Broker, BrokerError
from .exceptions import AskError, RuntimeClosedError
from .loop import event_loop_name, run
from .routes import shard_of
from .runtime import AgentRuntime
from .scope import GLOBAL, Scope
from .sequence import Gap
from .streams import ReplyOverflow, ReplyStream
from .superseding import superseding

__all__ = [
    "DEFAULT_BUS",
    "DEFERRED_REPLY",
    "GLOBAL",
    "Agent",
    "AgentHost",
    "AgentRuntime",
    "AskError",
    "Broker",
    "BrokerError",
    "BusAddress",
    "Gap",
    "Handler",
    "Handlers",
    "ReplyOverflow",
    "ReplyStream",
    "RuntimeClosedError",
    "RuntimeContext",
    "Scope",
    "configure_logging",
    "event_loop_name",
    "get_logger",
    "parse_bus",
    "run",
    "runtime_dir",
    "shard_of",
    "subscribe",
    "superseding",
]
