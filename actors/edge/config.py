"""The edge-box configuration: one TOML file decoded into typed, validated msgspec config.

The file names the bus, the models, the participant context, the destinations and
router, the supervisor's timings and restart policy, and the processes ``xrmq up``
starts (which roles each runs, how many replicas, in which order). ``examples/edge-box.toml``
documents every key; ``default_config()`` is the built-in default that needs no file.

Every error is one ``ConfigError`` (a ``ValueError``) naming the file, the key as a
dotted path and the rule, e.g. ``edge.toml: processes.conversation.replicas: must be >= 1``.
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

from xrmq.actors.context.config import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_TOPIC_BUDGET_BYTES,
    Budget,
    ContextOptions,
    context_options,
)
from xrmq.actors.context.store import ON_CORRUPT
from xrmq.actors.explain import explain, kind_of
from xrmq.actors.models import ModelSpec, parse_model_spec
from xrmq.actors.runtime.address import DEFAULT_BUS, is_loopback_tcp, parse_bus
from xrmq.actors.runtime.broker import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_SUBSCRIBER_BUDGET_BYTES
from xrmq.schemas import CompactionPrompts

DEFAULT_SOURCE = "<built-in default>"
"""What errors name as the file when the config did not come from one."""

TOPIC_MODES = ("summary", "incremental")
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
    """What one subscriber that stopped reading may cost the broker; beyond, the broker drops its
    messages (the subscriber reports them as gaps)."""
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


class TopicConfig(_Section, frozen=True):
    mode: str
    """``summary`` (an update replaces the topic's state) or ``incremental`` (updates append and are
    compacted)."""
    budget_bytes: Budget | None = None
    """This topic's budget; None uses ``context.topic_budget_bytes``."""


class PromptsConfig(_Section, frozen=True):
    source: str | None = None
    dialogue: str | None = None
    condense: str | None = None

    def prompts(self) -> CompactionPrompts:
        """The ``CompactionPrompts`` with the defaults for every prompt not given."""
        given = {
            name: value
            for name in ("source", "dialogue", "condense")
            if (value := getattr(self, name)) is not None
        }
        return CompactionPrompts(**given)


class ContextSettings(_Section, frozen=True):
    topics: dict[str, TopicConfig] = {}
    """Context topics by name, in the order their summaries are rendered."""
    dialogue_budget_bytes: Budget = DEFAULT_DIALOGUE_BUDGET_BYTES
    topic_budget_bytes: Budget = DEFAULT_TOPIC_BUDGET_BYTES
    """Budget of every topic that does not set its own ``budget_bytes``."""
    compaction_input_budget_bytes: Budget = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES
    prompts: PromptsConfig = PromptsConfig()
    persist: bool = True
    """Whether the context processes journal every section state (SQLite) and restore it
    after a restart."""
    state_dir: str | None = None
    """Where the journals live (one per context process); None: a per-bus directory
    under ``$XDG_STATE_HOME/xrmq``, else ``~/.local/state/xrmq``."""
    on_corrupt: str = "error"
    """A journal that cannot be read: ``error`` (the process does not start, naming the
    file) or ``backup_and_start_empty`` (moved aside, the process starts empty)."""

    def options(self) -> ContextOptions:
        """The context configuration this table describes (checked by ``context_options``)."""
        return context_options(**self.manager_kwargs())

    def manager_kwargs(self) -> dict[str, Any]:
        """The ``ContextManager`` constructor's keyword arguments this table describes (the
        section fields of ``ContextOptions``)."""
        return {
            "summary_context_topics": [
                name for name, topic in self.topics.items() if topic.mode == "summary"
            ],
            "incremental_context_topics": [
                name for name, topic in self.topics.items() if topic.mode == "incremental"
            ],
            "dialogue_budget_bytes": self.dialogue_budget_bytes,
            "topic_budget_bytes": {name: self.topic_budget(name) for name in self.topics},
            "compaction_input_budget_bytes": self.compaction_input_budget_bytes,
            "compaction_prompts": self.prompts.prompts(),
        }

    def topic_budget(self, name: str) -> int:
        budget = self.topics[name].budget_bytes
        return self.topic_budget_bytes if budget is None else budget


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
    context: ContextSettings = ContextSettings()
    destinations: dict[str, DestinationConfig] = {}
    router: RouterConfig = RouterConfig()
    supervisor: SupervisorConfig = SupervisorConfig()
    processes: dict[str, ProcessConfig] = {}
    voice: VoiceConfig = VoiceConfig()
    source: str = DEFAULT_SOURCE
    """The file this config came from (set by the loader; not a TOML key)."""

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
    renderer in processes of their own. ``examples/edge-box.toml`` spells out the same.
    """
    return decode_config(
        {
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
    )


def decode_config(raw: Mapping[str, Any], *, source: str = DEFAULT_SOURCE) -> EdgeConfig:
    """Validate a decoded TOML document into ``EdgeConfig``; ``ConfigError`` on the first broken
    rule."""
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
    )
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


def _context(raw: dict[str, Any], source: str) -> ContextSettings:
    topics_raw = raw.get("topics", {})
    if not isinstance(topics_raw, dict):
        raise ConfigError(source, "context.topics", f"must be a table, got {kind_of(topics_raw)}")
    topics = {
        name: _convert(value, TopicConfig, f"context.topics.{name}", source)
        for name, value in topics_raw.items()
    }
    settings: ContextSettings = _convert({**raw, "topics": {}}, ContextSettings, "context", source)
    settings = msgspec.structs.replace(settings, topics=topics)
    for name, topic in topics.items():
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
    return settings


_CONTEXT_KEYS = {
    "summary_context_topics": "context.topics",
    "incremental_context_topics": "context.topics",
}
"""The edge key of a ``ContextOptions`` field whose name differs in the TOML table."""


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
    if destination.max_iterations < 1:
        raise ConfigError(source, f"{key}.max_iterations", "must be >= 1")
    if destination.tool_timeout_s <= 0:
        raise ConfigError(source, f"{key}.tool_timeout_s", "must be > 0")
    if destination.token_threshold <= 0:
        raise ConfigError(source, f"{key}.token_threshold", "must be > 0")


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
        "vad_threshold": 0.15 < voice.vad_threshold < 1.0,
        "max_utterance_s": voice.max_utterance_s > voice.min_speech_s,
    }
    texts = {
        "stt": "must be 'whisper', 'whisper:DIR' or a litellm model string",
        "tts": "must be 'espeak' or a litellm model string",
        "vad_threshold": "must be in (0.15, 1)",
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
        if not 0 <= process.nice <= 19:
            raise ConfigError(
                source,
                f"{key}.nice",
                "must be in [0, 19] (a process may lower its priority, not raise it)",
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
    if security.rescan_s < 0:
        raise ConfigError(source, "bus.security.rescan_s", "must be >= 0 (0: never re-scan)")
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
