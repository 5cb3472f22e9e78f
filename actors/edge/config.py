"""The edge-box configuration: one TOML file decoded into typed, validated msgspec config.

The file names the bus, the models, the participant context, the destinations and
router, the supervisor's timings and restart policy, and the processes ``xrmq up``
starts (which roles each runs, how many replicas, in which order). ``examples/edge-box.toml``
documents every key; ``default_config()`` is the built-in default that needs no file.

Every error is one ``ConfigError`` (a ``ValueError``) naming the file, the key as a
dotted path and the rule, e.g. ``edge.toml: processes.conversation.replicas: must be >= 1``.
Every number has a range (``RANGES``: ``<key>: must be in [min, max], got <value>``). A
file that names no processes runs the default box's (``with_default_box``; ``defaulted``
says which tables it took).
Decoding is pure apart from reading the file: no sockets, no directories, no imports
of the roles (``roles.check_roles`` resolves role names separately).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from xrmq.actors.context.config import TOPIC_MODES, ContextTable, TopicTable
from xrmq.actors.context.store import ON_CORRUPT
from xrmq.actors.explain import explain, kind_of
from xrmq.actors.models import ModelSpec, parse_model_spec
from xrmq.actors.runtime.address import DEFAULT_BUS, is_loopback_tcp, parse_bus
from xrmq.actors.runtime.broker import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SUBSCRIBER_BUDGET_BYTES

DEFAULT_SOURCE = "<built-in default>"
"""What errors name as the file when the config did not come from one."""

DECISION_SERVICES = ("first", "rules", "llm")
GIVE_UP_POLICIES = ("stay_down", "stop_box")
DEFAULT_GIVE_UP = "stay_down"
"""A process over its crash limit is left down, reported, and the rest keeps running
(the broker is the exception: without it nothing runs, so giving up on it stops the box)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_ROLE = re.compile(r"^(?:[a-z][a-z0-9-]*|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")


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


SECURITY_MODES = ("none", "curve")


class SecurityConfig(_Section, frozen=True):
    mode: str = "none"
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


REALTIME_PROVIDERS = ("offline", "openai")
REALTIME_POLICIES = ("proactive", "natural")
BACKLOG_OVERFLOW = ("drop_oldest", "drop_newest")
BOUNDARY_TIMEOUT = ("natural", "keep")
Ratio = Annotated[float, msgspec.Meta(gt=0, le=1)]
"""A share of a limit: ``must be > 0 and <= 1``."""


class RealtimeConfig(_Section, frozen=True):
    """``[destinations.NAME.realtime]``: a ``kind = "realtime"`` destination's session
    (``RealtimeConversation``, docs in README "Realtime sessions")."""

    provider: str = "offline"
    """``offline`` (the offline realtime server, started inside the destination's process on
    loopback) or ``openai`` (the OpenAI Realtime protocol at ``base_url``)."""
    base_url: str | None = None
    """For ``openai``: the ws:// or wss:// URL (None: OpenAI's); Azure and compatible servers."""
    model: str = "gpt-realtime"
    """For ``openai``: the realtime model (a query parameter unless ``base_url`` names one)."""
    api_key_env: str | None = None
    """For ``openai``: the variable holding the key, which must be set (None:
    ``$OPENAI_API_KEY`` when set, else no key: a local compatible server)."""
    auth_header: str = "authorization"
    """For ``openai``: ``authorization`` (Bearer) or ``api-key`` (Azure)."""
    voice: str = "alloy"
    compress_at: Ratio = 0.70
    """Pressure from which the background checkpoint (summary + verbatim tail) starts."""
    rollover_at: Ratio = 0.85
    """Pressure by which the session is rolled over at the next safe boundary."""
    max_context_tokens: AtLeastOne | None = None
    """The session limits pressure is measured against; None: the provider's (``openai``:
    32,000 tokens and 30 minutes), no such limit for the others."""
    max_audio_turns: AtLeastOne | None = None
    max_audio_duration_s: Positive | None = None
    max_session_s: Positive | None = None
    policy: str = "proactive"
    """``proactive`` (roll over at a safe boundary) or ``natural`` (keep the checkpoint for
    the next disconnect)."""
    backlog_items: AtLeastOne = 500
    """Input items (20 ms frames) buffered while a session is replaced."""
    overflow: str = "drop_oldest"
    """A full backlog: ``drop_oldest`` or ``drop_newest`` (counted, logged)."""
    connect_attempts: AtLeastOne = 3
    keep_tail: NotNegative = 4
    """Messages of the checkpoint kept verbatim after the summary."""
    boundary_wait_s: Positive = 20.0
    """How long a scheduled rollover waits for the participant's turn to end."""
    on_boundary_timeout: str = "natural"
    """After ``boundary_wait_s`` with the user turn still open: ``natural`` (the checkpoint
    waits for the next disconnect, counted, logged) or ``keep`` (keep waiting)."""
    connect_latency_s: NotNegativeSeconds = 0.0
    """For ``offline``: the server's connect latency (a provider's is about 1.1 s)."""
    server_max_context_tokens: AtLeastOne | None = None
    """For ``offline``: the server's own context window (it truncates beyond it);
    None: ``max_context_tokens``."""


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
    kind: str = "conversation"
    """``conversation`` (a ``Conversation``), ``tools`` (a ``ToolAgent``) or ``realtime``
    (a ``RealtimeConversation``: speech to speech on ``audio.in``/``audio.out``)."""
    tool_servers: list[str] = []
    """For ``tools``: the tool servers whose tools it calls (``camera`` -> ``camera__*``)."""
    max_iterations: int = 8
    """For ``tools``: model calls per turn at most."""
    tool_timeout_s: float = 10.0
    """For ``tools``: how long one tool call may take before it is an error result."""
    token_threshold: int = 192_000
    """For ``tools``: docs/tools.md's ``auto_compact.token_threshold``."""
    realtime: RealtimeConfig | None = None
    """For ``realtime``: the session (None: every default)."""


DESTINATION_KINDS = ("conversation", "tools", "realtime")


class RouterConfig(_Section, frozen=True):
    decisions: str = "first"
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
    on_give_up: str = DEFAULT_GIVE_UP
    """Over its crash limit: ``stay_down`` (left down and reported; the rest keeps
    running; ``xrmq up`` exits 1 when the box stops) or ``stop_box`` (stop everything)."""
    nice: int = 0
    """OS scheduling niceness (0-19): the background roles (context, compaction) run at 19
    by default, so on a busy box the answer path (router, conversation, renderer) gets
    the CPU first and compaction never delays an answer; they still get every cycle the
    answer path leaves idle."""


class VoiceConfig(_Section, frozen=True):
    """The ``voice`` role (speech in) and the renderer's speech out (``actors/voice``)."""

    stt: str = "whisper"
    """``whisper`` (the bundled tiny.en weights), ``whisper:/path/to/model-dir`` (any
    faster-whisper model directory) or a litellm transcription model (``openai/whisper-1``)."""
    api_base: str | None = None
    """For a litellm model: the provider's base URL (a local OpenAI-compatible server)."""
    api_key_env: str | None = None
    """For a litellm model: the variable holding its key."""
    vad_threshold: float = 0.5
    min_speech_s: NotNegativeSeconds = 0.25
    trailing_silence_s: Positive = 0.4
    max_utterance_s: float = 15.0
    barge_in_min_s: NotNegativeSeconds = 0.6
    """Voiced seconds over the assistant's playback before the speech interrupts it."""
    barge_in_min_words: NotNegative = 0
    """Words the transcript must also have to interrupt (0: duration alone)."""
    context_bias: bool = True
    """Give the recognizer the participant's context (names, numbers, places) as its prompt."""
    speech_out: bool = False
    """The ``renderer`` role speaks onto ``audio.out`` instead of the console."""
    tts: str = "espeak"
    """Speech out: ``espeak`` (espeak-ng, offline) or a litellm speech model (``openai/tts-1``,
    with ``api_base`` and ``api_key_env``)."""
    tts_voice: str = "alloy"
    """The litellm speech model's voice."""


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


class EdgeConfig(_Section, frozen=True):
    bus: BusConfig = BusConfig()
    models: ModelsConfig = ModelsConfig()
    context: ContextTable = ContextTable()
    destinations: dict[str, DestinationConfig] = {}
    router: RouterConfig = RouterConfig()
    supervisor: SupervisorConfig = SupervisorConfig()
    processes: dict[str, ProcessConfig] = {}
    voice: VoiceConfig = VoiceConfig()
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


# ---------------------------------------------------------------------------- ranges
# Issue 29 item 10: a number a type allows can still be absurd (``shutdown_timeout_s = inf``
# waits forever; ``max_message_bytes = 2**63`` overflows ZeroMQ's C long at start). Every
# number of the config has a range here, checked once the file is decoded, before the rules
# across keys, so the error names the key and its range.

_SECONDS = (0.001, 3600)
"""A timeout or a wait: a millisecond to an hour."""
_LONG_SECONDS = (0.001, 86_400)
"""A window or a session: up to a day."""
_TEXT_BYTES = (1, 1 << 24)
"""A context budget: up to 16 MiB of rendered text."""
_TOKENS = (1, 10_000_000)

_MODEL_RANGES: dict[str, tuple[float, float]] = {
    "timeout_s": _SECONDS,
    "temperature": (0, 2),
    "max_tokens": (1, 1_000_000),
    "retries": (0, 100),
    "time_to_first_token_s": (0, 3600),
    "tokens_per_second": (0, 1_000_000),
}
"""A model spec's numbers, wherever a spec is named (``models.*``, ``destinations.*.model``)."""

_RESTART_RANGES: dict[str, tuple[float, float]] = {
    "max_crashes": (1, 10_000),
    "window_s": _LONG_SECONDS,
    "backoff_initial_s": _SECONDS,
    "backoff_max_s": _LONG_SECONDS,
}

_REALTIME_RANGES: dict[str, tuple[float, float]] = {
    "compress_at": (0.01, 1),
    "rollover_at": (0.01, 1),
    "max_context_tokens": _TOKENS,
    "max_audio_turns": (1, 1_000_000),
    "max_audio_duration_s": _LONG_SECONDS,
    "max_session_s": _LONG_SECONDS,
    "backlog_items": (1, 1_000_000),
    "connect_attempts": (1, 100),
    "keep_tail": (0, 10_000),
    "boundary_wait_s": _SECONDS,
    "connect_latency_s": (0, 60),
    "server_max_context_tokens": _TOKENS,
}

RANGES: dict[str, tuple[float, float]] = {
    "bus.max_message_bytes": (1024, 1 << 30),
    "bus.subscriber_budget_bytes": (1 << 20, 1 << 34),
    "bus.security.rescan_s": (0, 3600),
    **{f"models.*.{field}": bounds for field, bounds in _MODEL_RANGES.items()},
    "context.dialogue_budget_bytes": _TEXT_BYTES,
    "context.topic_budget_bytes": _TEXT_BYTES,
    "context.compaction_input_budget_bytes": _TEXT_BYTES,
    "context.topics.*.budget_bytes": _TEXT_BYTES,
    "context.retire_idle_s": (1, 86_400),
    "context.max_resident_participants": (1, 10_000_000),
    **{f"destinations.*.model.{field}": bounds for field, bounds in _MODEL_RANGES.items()},
    "destinations.*.max_iterations": (1, 1000),
    "destinations.*.tool_timeout_s": _SECONDS,
    "destinations.*.token_threshold": _TOKENS,
    **{f"destinations.*.realtime.{field}": bounds for field, bounds in _REALTIME_RANGES.items()},
    "router.history_limit": (1, 10_000),
    "router.destination_dead_after_s": _SECONDS,
    "supervisor.ready_timeout_s": _SECONDS,
    "supervisor.shutdown_timeout_s": _SECONDS,
    "supervisor.metrics_interval_s": (0.001, 60),
    "supervisor.liveness_timeout_s": _SECONDS,
    "supervisor.stuck_after_s": _LONG_SECONDS,
    **{f"supervisor.restart.{field}": bounds for field, bounds in _RESTART_RANGES.items()},
    "processes.*.replicas": (1, 256),
    "processes.*.compaction_workers": (1, 256),
    "processes.*.nice": (0, 19),
    **{f"processes.*.restart.{field}": bounds for field, bounds in _RESTART_RANGES.items()},
    "voice.vad_threshold": (0.15, 1),
    "voice.min_speech_s": (0, 60),
    "voice.trailing_silence_s": (0.001, 60),
    "voice.max_utterance_s": _SECONDS,
    "voice.barge_in_min_s": (0, 60),
    "voice.barge_in_min_words": (0, 1000),
}
"""Every number of the config, by dotted key (``*``: any one table name), and its inclusive
range (finite). A number without an entry is a bug: ``range_of`` raises ``KeyError``."""

_UNCHECKED = ("source", "options", "thinking_off")
"""Fields not walked: the file's name, and provider parameters passed to the provider as
written (their numbers are the provider's to judge)."""


def _check_values(config: EdgeConfig, source: str) -> None:
    """The rules of single numbers that say more than their range; checked before it."""
    if config.bus.security.rescan_s < 0:
        raise ConfigError(source, "bus.security.rescan_s", "must be >= 0 (0: never re-scan)")
    for name, destination in config.destinations.items():
        if destination.kind != "tools":
            continue
        key = f"destinations.{name}"
        if destination.max_iterations < 1:
            raise ConfigError(source, f"{key}.max_iterations", "must be >= 1")
        if destination.tool_timeout_s <= 0:
            raise ConfigError(source, f"{key}.tool_timeout_s", "must be > 0")
        if destination.token_threshold <= 0:
            raise ConfigError(source, f"{key}.token_threshold", "must be > 0")
    if not 0.15 < config.voice.vad_threshold < 1.0:
        raise ConfigError(source, "voice.vad_threshold", "must be in (0.15, 1)")
    for name, process in config.processes.items():
        if not 0 <= process.nice <= 19:
            raise ConfigError(
                source,
                f"processes.{name}.nice",
                "must be in [0, 19] (a process may lower its priority, not raise it)",
            )


def range_of(key: str) -> tuple[float, float]:
    """The inclusive range of the number at dotted ``key`` (``KeyError`` when it has none)."""
    parts = key.split(".")
    for pattern, bounds in RANGES.items():
        names = pattern.split(".")
        if len(names) == len(parts) and all(n in ("*", p) for n, p in zip(names, parts)):
            return bounds
    raise KeyError(f"{key}: no range in RANGES")


def check_ranges(config: EdgeConfig, source: str) -> None:
    """Raise ``ConfigError`` at the first number outside its range (NaN is outside every one):
    ``<file>: <key>: must be in [<min>, <max>], got <value>``."""
    for key, value in _numbers(config, ""):
        low, high = range_of(key)
        if not low <= value <= high:
            raise ConfigError(
                source, key, f"must be in [{_bound(low)}, {_bound(high)}], got {value!r}"
            )


def _numbers(value: object, key: str) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            if field not in _UNCHECKED:
                found += _numbers(getattr(value, field), _join(key, field))
    elif isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, msgspec.Struct):
                found += _numbers(item, f"{key}.{name}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        found.append((key, value))
    return found


def _bound(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


# ---------------------------------------------------------------------------- the default box
# Issue 29 item 8: the most common first edit is "use my model", a file with only [models].
# Refusing it ("processes: none configured") made every new user copy the whole reference
# file; a file that names no processes now runs the built-in default box with its changes.

DEFAULT_BOX: dict[str, Any] = {
    "context": {"topics": {"scene": {"mode": "summary"}, "notes": {"mode": "incremental"}}},
    "destinations": {
        "conversation": {
            "description": (
                "General assistant: answers questions from its own knowledge and the "
                "participant's context."
            ),
        }
    },
    "router": {"default": "conversation"},
    "processes": {
        "context": {"roles": ["context"], "nice": 19},
        "compaction": {"roles": ["compaction"], "after": ["context"], "nice": 19},
        "conversation": {"roles": ["conversation"], "after": ["context"]},
        "router": {"roles": ["router"], "after": ["conversation"]},
        "renderer": {"roles": ["renderer"]},
    },
}
"""The built-in default box as a TOML document (``default_config``)."""


def with_default_box(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], tuple[str, ...]]:
    """``raw`` and the tables it takes from ``DEFAULT_BOX`` (dotted names, in order).

    A document that names no processes (no ``[processes]`` or an empty one) gets the
    default box's; and, where it names none of its own, the default box's destination
    (with ``router.default``) and context topics. Anything else it sets is kept. A
    document that names processes is returned unchanged: it describes its box itself.
    """
    if raw.get("processes"):
        return raw, ()
    box = {**raw, "processes": DEFAULT_BOX["processes"]}
    defaulted = ["processes"]
    router = raw.get("router", {})
    if not raw.get("destinations") and isinstance(router, dict):
        box["destinations"] = DEFAULT_BOX["destinations"]
        box["router"] = {**DEFAULT_BOX["router"], **router}
        defaulted.append("destinations")
    context = raw.get("context", {})
    if isinstance(context, dict) and not context.get("topics"):
        box["context"] = {**context, "topics": DEFAULT_BOX["context"]["topics"]}
        defaulted.append("context.topics")
    return box, tuple(defaulted)


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


# ---------------------------------------------------------------------------- loading


def load_config(path: str | Path) -> EdgeConfig:
    """Read and validate the TOML file at ``path``; ``ConfigError`` naming file, key and rule."""
    source = str(path)
    try:
        text = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(source, "", f"cannot read: {error.strerror or error}") from None
    try:
        raw = tomllib.loads(text.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(source, "", f"invalid TOML: {error}") from None
    return decode_config(raw, source=source)


def default_config() -> EdgeConfig:
    """The built-in default: every actor of the edge box on the default bus, offline models.

    A summary topic ``scene`` and an incremental topic ``notes``; one conversation
    destination; context sections, compaction workers, conversation, router and voice
    renderer in processes of their own (``DEFAULT_BOX``). ``examples/edge-box.toml``
    spells out the same.
    """
    return decode_config(DEFAULT_BOX)


def decode_config(raw: Mapping[str, Any], *, source: str = DEFAULT_SOURCE) -> EdgeConfig:
    """Validate a decoded TOML document into ``EdgeConfig``; ``ConfigError`` on the first broken
    rule."""
    raw, defaulted = with_default_box(raw)
    top = _convert(raw, _RawTop, "", source)
    models = _models(top.models, source)
    context = _context(top.context, source)
    destinations = {
        name: _destination(value, f"destinations.{name}", source)
        for name, value in _table(top.destinations, "destinations", source).items()
    }
    processes = {
        name: _convert(value, ProcessConfig, f"processes.{name}", source)
        for name, value in _table(top.processes, "processes", source).items()
    }
    config = EdgeConfig(
        bus=_bus(top.bus, source),
        models=models,
        context=context,
        destinations=destinations,
        router=_convert(top.router, RouterConfig, "router", source),
        supervisor=_convert(top.supervisor, SupervisorConfig, "supervisor", source),
        processes=processes,
        voice=_convert(top.voice, VoiceConfig, "voice", source),
        source=source,
        defaulted=defaulted,
    )
    _check_values(config, source)
    check_ranges(config, source)
    _check_context(context, source)
    _validate(config, source)
    return config


class _RawTop(_Section, frozen=True):
    bus: dict[str, Any] = {}
    models: dict[str, Any] = {}
    context: dict[str, Any] = {}
    destinations: dict[str, Any] = {}
    router: dict[str, Any] = {}
    supervisor: dict[str, Any] = {}
    processes: dict[str, Any] = {}
    voice: dict[str, Any] = {}


def _bus(raw: dict[str, Any], source: str) -> BusConfig:
    """``[bus]``, its identities converted one by one so an error names ``bus.identities.NAME``."""
    identities_raw = raw.get("identities", {})
    if not isinstance(identities_raw, dict):
        kind = kind_of(identities_raw)
        raise ConfigError(source, "bus.identities", f"must be a table, got {kind}")
    identities = {
        name: _convert(value, IdentityConfig, f"bus.identities.{name}", source)
        for name, value in _table(identities_raw, "bus.identities", source).items()
    }
    bus: BusConfig = _convert({**raw, "identities": {}}, BusConfig, "bus", source)
    return msgspec.structs.replace(bus, identities=identities)


def _table(value: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    for name in value:
        if not _NAME.match(name):
            raise ConfigError(
                source,
                f"{key}.{name}",
                "names use letters, digits, '-' and '_', starting with a letter or digit",
            )
    return value


def _convert(value: Any, type_: type, key: str, source: str) -> Any:
    """``msgspec.convert``; a value that does not fit is explained from ``type_``'s structure
    (``xrmq.actors.explain``: the key, and the rule its type and ``msgspec.Meta`` state)."""
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as error:
        problem = explain(value, type_)
        if problem is None:  # a rule the walk does not model: msgspec's own words
            raise ConfigError(source, key, str(error)) from None
        raise ConfigError(source, problem.key(key), problem.rule) from None


def _join(key: str, field: str) -> str:
    return f"{key}.{field}" if key else field


def _model(value: Any, key: str, source: str) -> ModelSpec:
    """``parse_model_spec`` with its errors (``ModelSpec.<field>: <rule>``, read from the
    type's structure or stated by ``ModelSpec`` itself) placed under ``key``."""
    try:
        return parse_model_spec(value)
    except ValueError as error:
        head, _, rule = str(error).partition(": ")
        field = head.removeprefix("ModelSpec").lstrip(".")
        if field == "preset" and isinstance(value, str):
            field = ""  # the value itself is the preset name
        raise ConfigError(source, _join(key, field) if field else key, rule) from None


def _models(raw: dict[str, Any], source: str) -> ModelsConfig:
    for name in raw:
        if name not in ModelsConfig.__struct_fields__:
            close = difflib.get_close_matches(name, ModelsConfig.__struct_fields__, n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else f" (allowed: {', '.join(ModelsConfig.__struct_fields__)})"
            )
            raise ConfigError(source, f"models.{name}", f"unknown key{hint}")
    return ModelsConfig(
        **{name: _model(value, f"models.{name}", source) for name, value in raw.items()}
    )


def _destination(raw: Any, key: str, source: str) -> DestinationConfig:
    if isinstance(raw, dict) and "model" in raw:
        spec = _model(raw["model"], f"{key}.model", source)
        raw = {**raw, "model": msgspec.structs.asdict(spec)}
    return _convert(raw, DestinationConfig, key, source)


def _context(raw: dict[str, Any], source: str) -> ContextTable:
    topics_raw = raw.get("topics", {})
    if not isinstance(topics_raw, dict):
        raise ConfigError(source, "context.topics", f"must be a table, got {kind_of(topics_raw)}")
    topics = {
        name: _convert(value, TopicTable, f"context.topics.{name}", source)
        for name, value in topics_raw.items()
    }
    settings: ContextTable = _convert({**raw, "topics": {}}, ContextTable, "context", source)
    return msgspec.structs.replace(settings, topics=topics)


def _check_context(settings: ContextTable, source: str) -> None:
    """The rules of ``[context]`` beyond each value's type and range."""
    for name, topic in settings.topics.items():
        if topic.mode not in TOPIC_MODES:
            raise ConfigError(
                source,
                f"context.topics.{name}.mode",
                f"must be {' or '.join(map(repr, TOPIC_MODES))}, got {topic.mode!r}",
            )
    if settings.on_corrupt not in ON_CORRUPT:
        allowed = " or ".join(map(repr, ON_CORRUPT))
        raise ConfigError(
            source, "context.on_corrupt", f"must be {allowed}, got {settings.on_corrupt!r}"
        )
    if settings.state_dir is not None and not settings.state_dir.strip():
        raise ConfigError(source, "context.state_dir", "must be a non-empty path")
    try:
        settings.prompts.prompts()
    except ValueError as error:
        field, _, rule = str(error).removeprefix("CompactionPrompts.").partition(": ")
        raise ConfigError(source, f"context.prompts.{field}", rule) from None
    try:
        settings.options()
    except ValueError as error:
        # Budgets and names were held to their types at decoding; what is left are the
        # rules across keys, reported at the key that has to change.
        parameter, _, rule = str(error).partition(": ")
        raise ConfigError(
            source, _CONTEXT_KEYS.get(parameter, f"context.{parameter}"), rule
        ) from None


_CONTEXT_KEYS = {
    "summary_context_topics": "context.topics",
    "incremental_context_topics": "context.topics",
}
"""The edge key of a ``ContextPlan`` field whose name differs in the TOML table."""


def _check_destination_kind(name: str, destination: DestinationConfig, source: str) -> None:
    key = f"destinations.{name}"
    if destination.kind not in DESTINATION_KINDS:
        raise ConfigError(
            source,
            f"{key}.kind",
            f"must be one of {', '.join(map(repr, DESTINATION_KINDS))}, got {destination.kind!r}",
        )
    if destination.realtime is not None and destination.kind != "realtime":
        raise ConfigError(
            source, f"{key}.realtime", 'only a kind = "realtime" destination has a realtime session'
        )
    if destination.kind == "realtime":
        _check_realtime(destination.realtime or RealtimeConfig(), f"{key}.realtime", source)
    if destination.kind != "tools":
        if destination.tool_servers:
            raise ConfigError(
                source, f"{key}.tool_servers", 'only a kind = "tools" destination calls tools'
            )
        return
    for server in destination.tool_servers:
        if not (0 < len(server) <= 40 and all(c.isalnum() or c == "-" for c in server)):
            raise ConfigError(
                source, f"{key}.tool_servers", f"{server!r}: must be 1-40 letters, digits or '-'"
            )


def _check_realtime(realtime: RealtimeConfig, key: str, source: str) -> None:
    """The rules across a realtime session's keys (each value's own type and range were
    checked while decoding)."""
    choices = {
        "provider": REALTIME_PROVIDERS,
        "policy": REALTIME_POLICIES,
        "overflow": BACKLOG_OVERFLOW,
        "on_boundary_timeout": BOUNDARY_TIMEOUT,
        "auth_header": ("authorization", "api-key"),
    }
    for field, allowed in choices.items():
        value = getattr(realtime, field)
        if value not in allowed:
            raise ConfigError(
                source,
                f"{key}.{field}",
                f"must be one of {', '.join(map(repr, allowed))}, got {value!r}",
            )
    if realtime.compress_at > realtime.rollover_at:
        raise ConfigError(
            source,
            f"{key}.compress_at",
            f"must be <= rollover_at ({realtime.rollover_at:g}): the checkpoint is prepared "
            "before the rollover needs it",
        )
    if realtime.provider == "offline":
        for field in ("base_url", "model", "api_key_env", "auth_header", "voice"):
            if getattr(realtime, field) != getattr(RealtimeConfig(), field):
                raise ConfigError(
                    source, f"{key}.{field}", 'only for provider = "openai" (a remote session)'
                )
    else:
        for field in ("connect_latency_s", "server_max_context_tokens"):
            if getattr(realtime, field) != getattr(RealtimeConfig(), field):
                raise ConfigError(
                    source, f"{key}.{field}", 'only for provider = "offline" (the offline server)'
                )
        url = realtime.base_url
        if url is not None and not url.startswith(("ws://", "wss://")):
            raise ConfigError(
                source, f"{key}.base_url", f"must be a ws:// or wss:// URL, got {url!r}"
            )
        if realtime.api_key_env is not None and not realtime.api_key_env.strip():
            raise ConfigError(source, f"{key}.api_key_env", "must name a variable (or be left out)")


def _check_voice(voice: VoiceConfig, source: str) -> None:
    rules = {
        "stt": bool(voice.stt.strip()) and voice.stt != "whisper:",
        "tts": bool(voice.tts.strip()),
        "max_utterance_s": voice.max_utterance_s > voice.min_speech_s,
    }
    texts = {
        "stt": "must be 'whisper', 'whisper:DIR' or a litellm model string",
        "tts": "must be 'espeak' or a litellm model string",
        "max_utterance_s": "must be > voice.min_speech_s",
    }
    for field, ok in rules.items():
        if not ok:
            raise ConfigError(source, f"voice.{field}", texts[field])


def _validate(config: EdgeConfig, source: str) -> None:
    """Rules across keys: names that refer to each other, counts, timings, the bus string."""
    _check_bus(config.bus.address, source)
    _check_security(config, source)
    if config.router.default is not None and config.router.default not in config.destinations:
        raise ConfigError(
            source,
            "router.default",
            f"must name a destination ({', '.join(config.destinations) or 'none configured'}), got "
            f"{config.router.default!r}",
        )
    if config.router.decisions not in DECISION_SERVICES:
        raise ConfigError(
            source,
            "router.decisions",
            f"must be one of {', '.join(map(repr, DECISION_SERVICES))}, got "
            f"{config.router.decisions!r}",
        )
    heartbeat = config.supervisor.metrics_interval_s
    if not config.router.destination_dead_after_s > heartbeat:
        raise ConfigError(
            source,
            "router.destination_dead_after_s",
            f"must be > supervisor.metrics_interval_s (the heartbeat, {heartbeat:g}s)",
        )
    for name, destination in config.destinations.items():
        if not destination.description.strip():
            raise ConfigError(source, f"destinations.{name}.description", "must be non-empty text")
        _check_destination_kind(name, destination, source)
    supervisor = config.supervisor
    if supervisor.liveness_timeout_s < 2 * supervisor.metrics_interval_s:
        raise ConfigError(
            source,
            "supervisor.liveness_timeout_s",
            "must be >= 2 x supervisor.metrics_interval_s (two missed heartbeats),"
            f" got {supervisor.liveness_timeout_s:g}",
        )
    _check_restart(supervisor.restart, "supervisor.restart", source)
    _check_voice(config.voice, source)
    for name, process in config.processes.items():
        key = f"processes.{name}"
        if not process.roles:
            raise ConfigError(source, f"{key}.roles", "must name at least one role")
        for index, role in enumerate(process.roles):
            if not _ROLE.match(role):
                raise ConfigError(
                    source,
                    f"{key}.roles[{index}]",
                    "must be a role name (lowercase, '-') or package.module:function, got "
                    f"{role!r}",
                )
            if role in process.roles[:index]:
                raise ConfigError(source, f"{key}.roles[{index}]", f"role {role!r} is listed twice")
        for index, dependency in enumerate(process.after):
            if dependency not in config.processes:
                raise ConfigError(
                    source, f"{key}.after[{index}]", f"must name a process, got {dependency!r}"
                )
            if dependency == name:
                raise ConfigError(
                    source, f"{key}.after[{index}]", "a process cannot wait for itself"
                )
        if process.restart is not None:
            _check_restart(process.restart, f"{key}.restart", source)
        if process.on_give_up not in GIVE_UP_POLICIES:
            allowed = " or ".join(map(repr, GIVE_UP_POLICIES))
            raise ConfigError(
                source, f"{key}.on_give_up", f"must be {allowed}, got {process.on_give_up!r}"
            )
    cycle = _cycle(config)
    if cycle:
        raise ConfigError(
            source, f"processes.{cycle[0]}.after", f"dependency cycle: {' -> '.join(cycle)}"
        )


SERVES_EVERY_PARTICIPANT = ("context", "compaction", "conversation", "router")
"""Built-in roles whose actors serve every participant: their identities cannot be bound."""


def _check_participants(
    config: EdgeConfig, name: str, participants: list[str], source: str
) -> None:
    """``bus.identities.NAME.participants``: each a participant id, a prefix ending in ``*``,
    or ``*``; and not on an identity running the box's own actors, which serve everyone."""
    key = f"bus.identities.{name}.participants"
    for index, pattern in enumerate(participants):
        if not pattern.strip() or "\x00" in pattern or "*" in pattern[:-1]:
            raise ConfigError(
                source,
                f"{key}[{index}]",
                f"{pattern!r}: a participant id, a prefix ending in '*' (\"guest-*\"), or '*'",
            )
    if config.bus.identities[name].capture:
        raise ConfigError(
            source,
            key,
            "capture = true reads every participant's messages: an identity bound to "
            "participants cannot have it",
        )
    from .identities import TOOL_IDENTITIES  # which imports this module

    for process, spec in config.processes.items():
        roles = [role for role in spec.roles if role in SERVES_EVERY_PARTICIPANT]
        if roles and config.identity(process) == name:
            raise ConfigError(
                source,
                key,
                f"identity {name!r} runs role {roles[0]!r} (process {process!r}), whose actors "
                "serve every participant: leave participants out of its table",
            )
    if name in TOOL_IDENTITIES:
        raise ConfigError(
            source, key, f"{name!r} is xrmq's own tool identity, which serves every participant"
        )


def _check_security(config: EdgeConfig, source: str) -> None:
    from xrmq.actors.runtime.security.acl import Patterns

    security = config.bus.security
    if security.mode not in SECURITY_MODES:
        raise ConfigError(
            source, "bus.security.mode", f"must be 'none' or 'curve', got {security.mode!r}"
        )
    beyond_loopback = is_loopback_tcp(config.bus.address) is False
    if security.mode == "none" and beyond_loopback and not security.insecure:
        raise ConfigError(
            source,
            "bus.address",
            f"{config.bus.address!r} binds tcp beyond loopback without security: "
            "anyone who can reach it owns the bus; "
            'set [bus.security] mode = "curve" (or insecure = true to accept that)',
        )
    if (
        security.mode == "curve"
        and not config.bus.address.startswith(("tcp://", "ipc://"))
        and "://" in config.bus.address
    ):
        raise ConfigError(source, "bus.security.mode", "curve needs an ipc:// or tcp:// bus")
    for name, identity in config.bus.identities.items():
        key = f"bus.identities.{name}"
        if name == "broker":
            raise ConfigError(
                source, key, "'broker' is the broker's own key, not a client identity"
            )
        if identity.key is not None and len(identity.key) != 40:
            raise ConfigError(source, f"{key}.key", "must be a Z85 public key (40 characters)")
        for field in ("publish", "sources", "subscribe"):
            try:
                Patterns(getattr(identity, field) or ())
            except ValueError as error:
                raise ConfigError(source, f"{key}.{field}", str(error)) from None
        if identity.participants is not None:
            _check_participants(config, name, identity.participants, source)
    for name, process in config.processes.items():
        if process.identity is not None and not _NAME.match(process.identity):
            raise ConfigError(
                source,
                f"processes.{name}.identity",
                "names use letters, digits, '-' and '_', starting with a letter or digit",
            )


def _check_bus(address: str, source: str) -> None:
    if address.startswith("inproc://"):
        raise ConfigError(
            source,
            "bus.address",
            "must be a name, ipc:// or tcp://: the processes of an edge box are separate OS "
            "processes",
        )
    if "://" in address:
        # parse_bus is pure for ipc:// and tcp:// (only a bare name touches the runtime dir)
        try:
            parse_bus(address)
        except ValueError as error:
            raise ConfigError(source, "bus.address", str(error).removeprefix("bus: ")) from None
    elif not address or "/" in address:
        raise ConfigError(
            source,
            "bus.address",
            f"a bus name must be non-empty and contain no '/', got {address!r}",
        )


def _check_restart(policy: RestartPolicyConfig, key: str, source: str) -> None:
    if policy.backoff_max_s < policy.backoff_initial_s:
        raise ConfigError(source, f"{key}.backoff_max_s", "must be >= backoff_initial_s")


def _cycle(config: EdgeConfig) -> list[str]:
    """A dependency cycle among ``after`` lists (as a path that returns to its start), or []."""
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for dependency in config.processes[name].after:
            if state.get(dependency) == 1:
                return [*path[path.index(dependency) :], dependency]
            if dependency not in state and (found := visit(dependency, [*path, dependency])):
                return found
        state[name] = 2
        return []

    for name in config.processes:
        if name not in state and (found := visit(name, [name])):
            return found
    return []


REPLY_WAIT_MARGIN_S = 10.0
"""What a client's default wait adds to the box's model timeouts: the way of a turn to the
model and back (bus, router, context lookup) on a loaded box."""


def reply_wait_s(config: EdgeConfig) -> float:
    """How long a client (``xrmq say``, ``xrmq chat``) waits for a reply by default.

    Why: the box bounds a stalled model by its first-token timeout and then ends the turn
    with the cause (``TurnEnded`` failed, ``ModelTimeout: no token in N s``); a client
    that gave up first would report nothing but its own timeout (issue 29, item 3). So
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
