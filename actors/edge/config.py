"""The edge-box configuration's schema: the typed tables one TOML file decodes into.

``EdgeConfig`` names the bus, the models, the participant context, the destinations and
router, the supervisor's timings and restart policy, the processes ``xrmq up`` starts
(which roles each runs, how many replicas, in which order) and the voice front end. The
box composes the tables its capabilities own (``VoiceConfig`` from ``xrmq.actors.voice``,
``RealtimeConfig`` from ``xrmq.actors.realtime``) with its own.
``examples/edge-box.toml`` documents every key.

Every error is one ``ConfigError`` (a ``ValueError``) naming the file, the key as a
dotted path and the rule, e.g. ``edge.toml: processes.conversation.replicas: must be >= 1``.
A choice is a ``Literal`` that msgspec checks while decoding; ``config_loader`` reads
and decodes a file (``load_config``, ``decode_config``, ``default_config``),
``config_ranges`` bounds every number and ``config_rules`` checks the rules across keys.
Pure: no sockets, no directories, no imports of the roles.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from xrmq.actors.context.config import ContextTable
from xrmq.actors.models import ModelSpec, parse_model_spec
from xrmq.actors.realtime.config import RealtimeConfig
from xrmq.actors.runtime.address import DEFAULT_BUS
from xrmq.actors.runtime.broker import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SUBSCRIBER_BUDGET_BYTES
from xrmq.actors.voice.config import VoiceConfig

DEFAULT_SOURCE = "<built-in default>"
"""What errors name as the file when the config did not come from one."""

TABLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
"""A name the config gives a table (a process, a destination, an identity)."""

SUPERVISOR_IDENTITY = "xrmq-up"
"""The identity of ``xrmq up`` itself on the bus (runtime ``xrmq-up.<pid>``): it reads every
heartbeat and publishes its report, which is also its probe of the broker."""
CONTEXT_IDENTITY = "xrmq-context"
"""The default identity of ``xrmq context ...`` (runtime ``xrmq-context-<id>``): a split
context manager that hosts nothing. It reads the sections' views and replica snapshots and
publishes on the context namespace (writes, clears, compactions, snapshot asks); ``clear``
asks the router to forget a participant (``participant.left`` as ``xrmq-context``) and reads
its confirmation (``participant.forgotten``). It cannot ask a question, speak as a
destination or read a participant's answers."""
TOOL_IDENTITY_NAMES = (SUPERVISOR_IDENTITY, CONTEXT_IDENTITY)
"""The identities of xrmq's own commands, which serve every participant; their
permissions are ``identities.TOOL_IDENTITIES``."""


class ConfigError(ValueError):
    """A config that breaks a rule: ``"<file>: <dotted key>: <rule>"``."""

    def __init__(self, source: str, key: str, rule: str) -> None:
        self.source, self.key, self.rule = source, key, rule
        super().__init__(f"{source}: {key}: {rule}" if key else f"{source}: {rule}")


AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
"""A count: ``must be >= 1`` (``msgspec.Meta``, checked while the file is decoded)."""
NotNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[float, msgspec.Meta(gt=0)]
"""A duration in seconds: ``must be > 0``."""
NotNegativeSeconds = Annotated[float, msgspec.Meta(ge=0)]


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every config table: misspelled keys are errors, fields are keyword-only."""


class SecurityConfig(_Section, frozen=True):
    mode: Annotated[Literal["none", "curve"], msgspec.Meta(description="'none' or 'curve'")] = (
        "none"
    )
    """``curve``: every bus socket authenticated and encrypted, per-identity ACLs;
    ``none``: plain."""
    keys: str = "keys"
    """Directory of the key pairs (the broker's, each process identity's; ``xrmq up --init-keys``
    writes them there). Relative paths are relative to the config file."""
    secret_key: str | None = None
    """The broker's secret key file; None: ``<keys>/broker.key_secret``."""
    authorized: str | None = None
    """Directory of admitted clients' public keys (``NAME.key`` is identity ``NAME``);
    None: ``keys``."""
    insecure: bool = False
    """Allow a plain (``mode = "none"``) bus on a tcp address that is not loopback."""
    rescan_s: float = 1.0
    """How often the broker looks for keys (and ``[bus.identities]`` tables) added or removed
    since it started, admitting or refusing them without a restart; 0: never."""


class IdentityConfig(_Section, frozen=True):
    key: str | None = None
    """Its Z85 public key; None: ``NAME.key`` in the ``authorized`` directory."""
    publish: list[str] | None = None
    """Topic patterns it may publish on (``name``, ``prefix*``, ``*``); None: its role defaults."""
    sources: list[str] | None = None
    """``source`` patterns its messages may carry; None: its role defaults."""
    subscribe: list[str] | None = None
    """Topic patterns it may subscribe to; None: its role defaults."""
    capture: bool = False
    """Whether it may read the capture socket (``xrmq record``)."""
    participants: list[str] | None = None
    """Participant patterns it may speak and listen as (``alice``, ``guest-*``, ``*``); the
    broker drops what it publishes as any other participant and narrows its subscriptions
    to these participants' messages (and global ones). None: every participant."""


class BusConfig(_Section, frozen=True):
    address: str = DEFAULT_BUS
    """A bus name (ipc sockets in the per-user runtime directory), ``ipc://PREFIX`` or ``tcp://HOST:PORT``."""
    capture: bool = True
    """Whether the broker binds the capture socket that ``xrmq record`` reads."""
    max_message_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_MESSAGE_BYTES
    """The largest frame a socket on the bus accepts (``ZMQ_MAXMSGSIZE``); a publisher sending a
    larger one has its connection dropped by the broker, and a runtime refuses to send one."""
    subscriber_budget_bytes: Annotated[int, msgspec.Meta(ge=1 << 20)] = (
        DEFAULT_SUBSCRIBER_BUDGET_BYTES
    )
    """What subscribers that stopped reading may cost the broker, in bytes; beyond, the broker
    shuts the connection of the one that does not drain (``broker.subscribers_evicted``), and
    the subscriber reports what it missed as gaps."""
    security: SecurityConfig = SecurityConfig()
    identities: dict[str, IdentityConfig] = {}
    """Bus identities by name: clients' keys and any identity's permissions."""


class ModelsConfig(_Section, frozen=True):
    answers: ModelSpec = parse_model_spec("offline")
    """The model conversations answer with (destinations may override it)."""
    compaction: ModelSpec = parse_model_spec("offline")
    """The model compaction workers summarize context with."""
    routing: ModelSpec = parse_model_spec("offline")
    """The model the router's ``llm`` decision service chooses destinations with."""


class AutoCompactConfig(_Section, frozen=True):
    """docs/tools.md's configuration of a tools destination's automatic compaction."""

    enabled: bool = True
    """The switch: false never compacts automatically (``/compact`` still does)."""
    token_threshold: int = 192_000
    """The trigger: the last response's ``total_tokens`` above it (counted by the tokenizer
    when the model reports no usage)."""


class DestinationConfig(_Section, frozen=True):
    description: str
    """What the destination answers: the routing aid the router chooses with."""
    instructions: str = ""
    """Appended to the system prompt of every request."""
    system_prompt: str | None = None
    """None uses the Conversation's default system prompt."""
    model: ModelSpec | None = None
    """None uses ``models.answers``."""
    keywords: list[str] = []
    """Words that send a turn here under the ``rules`` decision service."""
    kind: Literal["conversation", "tools", "realtime"] = "conversation"
    """``conversation`` (a ``Conversation``), ``tools`` (a ``ToolAgent``) or ``realtime``
    (a ``RealtimeConversation``: speech to speech on ``audio.in``/``audio.out``)."""
    tool_servers: list[str] = []
    """For ``tools``: the tool servers whose tools it calls (``camera`` -> ``camera__*``)."""
    max_iterations: int = 8
    """For ``tools``: model calls per turn at most."""
    tool_timeout_s: float = 10.0
    """For ``tools``: how long one tool call may take before it is an error result."""
    auto_compact: AutoCompactConfig = AutoCompactConfig()
    """For ``tools``: docs/tools.md's ``auto_compact = { enabled, token_threshold }``."""
    compactor: str | None = None
    """For ``tools``: ``package.module:Class`` of a ``CompactorAbstract`` built without
    arguments (``auto_compact.enabled`` still switches it); None: ``AutoCompactor`` with
    ``auto_compact.token_threshold``."""
    realtime: RealtimeConfig | None = None
    """For ``realtime``: the session (None: every default)."""


class RouterConfig(_Section, frozen=True):
    decisions: Literal["first", "rules", "llm"] = "first"
    """``first`` (the default destination takes every turn), ``rules`` (keywords) or ``llm``
    (``models.routing`` chooses)."""
    default: str | None = None
    """The destination tried when no other fits; None: the first destination."""
    history_limit: AtLeastOne | None = None
    """Exchanges of shared history passed with each turn; None: the router's default."""
    destination_dead_after_s: float = 1.5
    """A destination process silent this long (no heartbeat) is taken as dead by the
    router's proxy: its answer in flight fails and its open reply stream is closed."""


class RestartPolicyConfig(_Section, frozen=True):
    max_crashes: AtLeastOne = 5
    """Crashes within ``window_s`` after which the supervisor gives up."""
    window_s: Positive = 60.0
    backoff_initial_s: Positive = 0.5
    """Delay before the first restart; doubled for every further crash in the window."""
    backoff_max_s: Positive = 30.0


class SupervisorConfig(_Section, frozen=True):
    ready_timeout_s: Positive = 30.0
    """How long a process may take to report ready before it counts as crashed."""
    shutdown_timeout_s: Positive = 10.0
    """How long a process may take to drain and exit after SIGTERM before it is killed."""
    metrics_interval_s: Positive = 1.0
    """How often every runtime publishes ``RuntimeMetrics`` (its heartbeat; ``xrmq top``)."""
    liveness_timeout_s: float = 5.0
    """A ready process whose heartbeat stops this long is killed (SIGKILL) and restarted."""
    stuck_after_s: Positive = 10.0
    """An actor whose mailbox is non-empty and has not moved this long is reported stuck."""
    restart_stuck: bool = True
    """Restart a stuck actor: cancel its handler in flight, keep its mailbox (``AgentRuntime``)."""
    restart: RestartPolicyConfig = RestartPolicyConfig()


class ProcessConfig(_Section, frozen=True):
    roles: list[str]
    """Roles this process runs: registered role names, or ``package.module:function``."""
    replicas: AtLeastOne = 1
    """OS processes running this entry; each owns one shard of the keyed kinds it hosts."""
    compaction_workers: AtLeastOne = 2
    """Compaction-worker actors per replica (for the ``compaction`` role)."""
    after: list[str] = []
    """Processes that must be ready before this one starts (and stop after it)."""
    restart: RestartPolicyConfig | None = None
    """None uses ``supervisor.restart``."""
    identity: str | None = None
    """The bus identity (key pair ``<keys>/<identity>.key_secret``) it connects as;
    None: its name."""
    on_give_up: Annotated[
        Literal["stay_down", "stop_box"], msgspec.Meta(description="'stay_down' or 'stop_box'")
    ] = "stay_down"
    """Over its crash limit: ``stay_down`` (left down and reported; the rest keeps
    running; ``xrmq up`` exits 1 when the box stops) or ``stop_box`` (stop everything).
    The broker is the exception: without it nothing runs, so giving up on it stops the box."""
    nice: int = 0
    """OS scheduling niceness (0-19): the background roles (context, compaction) run at 19
    by default, so on a busy box the answer path (router, conversation, renderer) gets
    the CPU first and compaction never delays an answer; they still get every cycle the
    answer path leaves idle."""


class ProcessInstance(msgspec.Struct, frozen=True):
    """One OS process of a config entry: replica ``shard`` of ``shards``."""

    process: str
    shard: int
    shards: int
    spec: ProcessConfig

    @property
    def runtime_name(self) -> str:
        """The runtime's (and the log prefix's) name: ``process``, or ``process.shard`` with
        replicas."""
        return self.process if self.shards == 1 else f"{self.process}.{self.shard}"


class TelemetryConfig(_Section, frozen=True):
    otlp_endpoint: (
        Annotated[
            str,
            msgspec.Meta(pattern=r"^https?://[^/\s]+", description="an http:// or https:// URL"),
        ]
        | None
    ) = None
    """The OTLP/HTTP collector every turn is sent to as a trace (its base URL, as
    ``$OTEL_EXPORTER_OTLP_ENDPOINT``, which applies when this is unset); None and no such
    variable: nothing is exported. Needs the ``otel`` extra."""


class EdgeConfig(_Section, frozen=True):
    bus: BusConfig = BusConfig()
    models: ModelsConfig = ModelsConfig()
    context: ContextTable = ContextTable()
    destinations: dict[str, DestinationConfig] = {}
    router: RouterConfig = RouterConfig()
    supervisor: SupervisorConfig = SupervisorConfig()
    processes: dict[str, ProcessConfig] = {}
    voice: VoiceConfig = VoiceConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    source: str = DEFAULT_SOURCE
    """The file this config came from (set by the loader; not a TOML key)."""
    defaulted: tuple[str, ...] = ()
    """The tables taken from ``DEFAULT_BOX`` because the file names no processes
    (``with_default_box``; set by the loader, not a TOML key)."""

    def path(self, value: str) -> Path:
        """A path of the config: relative ones are relative to the config file's directory."""
        path = Path(value).expanduser()
        if path.is_absolute() or self.source == DEFAULT_SOURCE:
            return path
        return Path(self.source).parent / path

    def identity(self, process: str) -> str:
        """A process's bus identity: its ``identity`` key, else its name (a role run alone too)."""
        spec = self.processes.get(process)
        return (spec.identity if spec is not None else None) or process

    def restart_policy(self, process: str) -> RestartPolicyConfig:
        return self.processes[process].restart or self.supervisor.restart

    def instances(self, process: str) -> list[ProcessInstance]:
        spec = self.processes[process]
        return [
            ProcessInstance(process, shard, spec.replicas, spec) for shard in range(spec.replicas)
        ]

    def startup_layers(self) -> list[list[str]]:
        """Process names in start order: each layer after every process its members name in
        ``after``.

        Stop in the reverse order. Config order is kept within a layer.
        """
        placed: dict[str, int] = {}
        while len(placed) < len(self.processes):
            for name, spec in self.processes.items():
                if name not in placed and all(dep in placed for dep in spec.after):
                    placed[name] = 1 + max((placed[dep] for dep in spec.after), default=-1)
        layers: list[list[str]] = [[] for _ in range(max(placed.values(), default=-1) + 1)]
        for name in self.processes:
            layers[placed[name]].append(name)
        return layers


def describe_defaulted(config: EdgeConfig) -> str | None:
    """What a config took from the default box, in words (``xrmq up`` prints it); None: nothing."""
    if not config.defaulted:
        return None
    parts = [f"processes ({', '.join(config.processes)})"]
    if "destinations" in config.defaulted:
        parts.append(f"destination {', '.join(map(repr, config.destinations))}")
    if "context.topics" in config.defaulted:
        parts.append(f"context topics ({', '.join(config.context.topics)})")
    return (
        "names no processes, so it runs the built-in default box's "
        + ", ".join(parts[:-1])
        + (" and " if len(parts) > 1 else "")
        + parts[-1]
        + " (examples/edge-box.toml spells them out)"
    )


REPLY_WAIT_MARGIN_S = 10.0
"""What a client's default wait adds to the box's model timeouts: the way of a turn to the
model and back (bus, router, context lookup) on a loaded box."""


def reply_wait_s(config: EdgeConfig) -> float:
    """How long a client (``xrmq say``, ``xrmq chat``) waits for a reply by default.

    Why: the box bounds a stalled model by its first-token timeout and then ends the turn
    with the cause (``TurnEnded`` failed, ``ModelTimeout: no token in N s``); a client
    that gave up first would report nothing but its own timeout. So
    the wait is the longest first-token timeout of the models that answer
    (``models.answers`` and each destination's own), plus ``models.routing``'s when the
    router asks a model (``router.decisions = "llm"``), plus ``REPLY_WAIT_MARGIN_S``.
    """
    answering = [config.models.answers]
    answering += [d.model for d in config.destinations.values() if d.model is not None]
    wait = max(spec.timeout_s for spec in answering) + REPLY_WAIT_MARGIN_S
    if config.router.decisions == "llm":
        wait += config.models.routing.timeout_s
    return wait
