"""``ToolAgent``: a routed destination (a ``RoutableAgent``) that answers by calling tools.

A turn runs the tool loop: the model is asked with the tools offered; when it asks for
tool calls they run in parallel (each a bus ask for a remote tool), their results go
back to the model, and so on until it answers without calls or ``max_iterations``
model calls were made (the last one then offers no tools, so it answers).

A request is: the system message (the system prompt and instructions; once the transcript
has a summary, seed 002's "summary + compaction note", the prompt verbatim as the summary's
``system_context`` section); the participant's shared
context (``ContextManager.blocks``, then the current time), as ``Conversation``
renders it; then the participant's transcript (earlier turns with their tool calls and
results, then this turn's; a turn's images go with its user message). The transcript's
state is a ``Conversation`` (OpenAI's typed chat messages): the turn is written through
the seed's methods (``add_user_message`` with the images, ``add_agent_message`` with the
tool calls and the reasoning under the model's own field, ``add_tool_result``), and the
request is those dictionaries as they are (``LLMService.stream`` takes them).

``take_back`` drops the transcript's last question and what answered it (``/retry``,
``/revise``), and takes that turn's exchange back from the shared context
(``ContextManager.retract_exchange``: the exchange id is the turn id, which the transcript
keeps per turn), so the question asked again sees neither; ``conversation`` shows the
transcript as OpenAI's typed chat messages (``conversation_state.Conversation``,
``/render``).

Framing is docs/context.md's, as in ``Conversation``: the first nonblank chunk awaits
``started()``; once a chunk was published an empty final frame closes the reply,
whether the answer completed, failed or was cancelled; the exchange is recorded in the
shared context, and the turn committed to the transcript, only after the final frame.
A cancelled turn (a barge-in) cancels its running tool calls, at their servers too,
and records nothing.

A streaming tool's chunks reach ``on_tool_chunk(participant_id, call, chunk)`` as the
tool yields them (local tools, and remote ones through ``ask_stream``), before the call
ends; the model and the transcript get the whole result when it ends, or, when the call
fails after some chunks, the error with the chunks as ``"partial"``.

Before each model call the compactor (``AutoCompactor``, docs/tools.md, or a custom
``CompactorAbstract``) checks the transcript, the current turn's messages included; tier 2
summaries come from ``summarize`` (the compaction workers or a model). A response without
usage gets its ``total_tokens`` counted by the tokenizer, marked estimated. The built-in
tool ``extract_compacted_tool_result`` returns a reclaimed original.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

import msgspec

from xrmq.actors.clock import now_us
from xrmq.actors.conversation import (
    ParticipantContext,
    add_usage,
    context_message,
    system_message,
    turn_usage,
)
from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.models import (
    ChatOptions,
    ChatResult,
    LLMService,
    ModelError,
    ToolCall,
    ToolSpec,
)
from xrmq.actors.routing.destination import ClosingDestination, answer_prologue
from xrmq.actors.runtime import get_logger
from xrmq.schemas import (
    AgentTurn,
    CompactionTime,
    DestinationResult,
    DestinationStages,
    ResponseOutput,
    RoutingAid,
    ToolCallTime,
    TurnUsage,
)
from xrmq.schemas._validation import check_positive
from xrmq.schemas.tools import ToolCallReply
from xrmq.topics import Topic

from .client import RemoteTool, ToolSet
from .conversation_state import Conversation
from .policy import (
    AutoCompactor,
    AutoCompactReport,
    Compacting,
    CompactorAbstract,
    Summarize,
    estimate_total_tokens,
)
from .store import TranscriptTopics
from .summary import compacted_system_message, llm_summarizer
from .tiers import SummaryCompactResult, ToolCallCompactResult
from .tool import Tool, failed
from .transcript import Transcript, UnknownToolCall
from .transcript_mirror import TranscriptMirror

EXTRACT_TOOL = ToolSpec(
    "extract_compacted_tool_result",
    "Return the original content of an earlier tool result that was compacted to a placeholder, "
    "by the ID the placeholder names.",
    {
        "type": "object",
        "properties": {"toolcall_id": {"type": "string"}},
        "required": ["toolcall_id"],
    },
)
"""The built-in tool every ``ToolAgent`` offers (docs/tools.md)."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant in a mixed-reality session. Use the tools to look things up "
    "instead of guessing, then answer briefly in plain spoken sentences."
)

DEFAULT_ROUTING = RoutingAid(
    "Tools: answers questions by calling tools (camera view, inventory, ...)."
)

TIER_COUNTERS = (
    "toolcall_rounds_total",
    "toolcall_reclaimed",
    "summary_rounds",
    "nothing_to_condense",
    "summarize_failed",
    "originals_evicted",
)
"""docs/tools.md's counters per tier and outcome that ``ToolAgent.tier_counters`` totals."""


class ToolsContext(ParticipantContext, Protocol):
    """What a ``ToolAgent`` needs from a ``ContextManager``: the conversation's needs, and
    taking an exchange back (``take_back``)."""

    async def retract_exchange(self, participant_id: str, exchange_id: object) -> None: ...


class _ModelTimes:
    """One answer's model stages across the tool loop's calls (the turn record's,
    ``schemas/stages.py``): the first request, the first text, the first chunk published,
    every call's usage added up, and the automatic compactions before the calls."""

    __slots__ = ("compactions", "first_chunk_us", "first_token_us", "request_us", "tools", "usage")

    def __init__(self) -> None:
        self.tools: list[ToolCallTime] = []
        self.compactions: list[CompactionTime] = []
        self.request_us: int | None = None
        self.first_token_us: int | None = None
        self.first_chunk_us: int | None = None
        self.usage: TurnUsage | None = None


class ToolAgent(ClosingDestination):
    """The tool-calling destination; see the module docstring.

    ``tools`` are local ``Tool`` s and ``RemoteTool`` s; ``servers`` names tool servers
    whose whole catalogs are discovered over the bus before the first turn (a server
    that does not answer is tried again on the next turn). ``context``, ``runtime``,
    ``output_topic``, ``instructions``, ``system_prompt``, ``routing``, ``options`` and
    ``clock`` are as for ``Conversation``. ``compactor`` (a ``CompactorAbstract``; default
    ``AutoCompactor()``, docs/tools.md's parameters) is awaited before each model call;
    ``summarize`` writes tier-2 summaries (default: ``llm`` itself). Calls to the tools
    of ``servers`` time out after ``tool_timeout_s``; discovery after
    ``discovery_timeout_s``. With ``transcripts`` (a store name) every transcript is
    mirrored to the keyed ``TranscriptActor`` s of that store (``store``) and loaded
    from them when this process does not hold it; ``transcripts`` (``TranscriptMirror``)
    holds them.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        context: ToolsContext,
        runtime: Any,
        output_topic: Topic[ResponseOutput],
        tools: Sequence[Tool | RemoteTool] = (),
        servers: Sequence[str] = (),
        instructions: str = "",
        system_prompt: str | None = None,
        routing: RoutingAid | None = None,
        options: ChatOptions | None = None,
        max_iterations: int = 8,
        compactor: CompactorAbstract | None = None,
        summarize: Summarize | None = None,
        discovery_timeout_s: float = 2.0,
        tool_timeout_s: float = 10.0,
        transcripts: str | None = None,
        on_tool_chunk: Callable[[str, ToolCall, str], Awaitable[None] | None] | None = None,
        clock: Callable[[], int] = now_us,
    ) -> None:
        if not callable(getattr(llm, "stream", None)):
            raise ValueError("ToolAgent.llm: must be an LLMService")
        for method in ("blocks", "record_exchange", "reconcile_history", "retract_exchange"):
            if not callable(getattr(context, method, None)):
                raise ValueError(f"ToolAgent.context: must be a ContextManager (it lacks {method})")
        if not callable(getattr(runtime, "ask", None)):
            raise ValueError("ToolAgent.runtime: must be an AgentRuntime")
        if not (isinstance(output_topic, Topic) and output_topic.message_type is ResponseOutput):
            raise ValueError("ToolAgent.output_topic: must be a Topic carrying ResponseOutput")
        check_positive(max_iterations, "ToolAgent.max_iterations")
        self.llm = llm
        self.context = context
        self.runtime = runtime
        self.output_topic = output_topic
        self.toolset = ToolSet(tools)
        if EXTRACT_TOOL.name in self.toolset:
            raise ValueError(f"ToolAgent.tools: {EXTRACT_TOOL.name} is built in")
        self.servers = list(servers)
        self.routing = DEFAULT_ROUTING if routing is None else routing
        self.options = ChatOptions() if options is None else options
        self.max_iterations = max_iterations
        if compactor is not None and not isinstance(compactor, CompactorAbstract):
            raise ValueError("ToolAgent.compactor: must be a CompactorAbstract")
        self.compactor = AutoCompactor() if compactor is None else compactor
        self.summarize = llm_summarizer(llm) if summarize is None else summarize
        self.discovery_timeout_s = discovery_timeout_s
        self.tool_timeout_s = tool_timeout_s
        self.store = None if transcripts is None else TranscriptTopics.of(transcripts)
        self.transcripts = TranscriptMirror(runtime, self.store, timeout_s=discovery_timeout_s)
        if on_tool_chunk is not None and not callable(on_tool_chunk):
            raise ValueError("ToolAgent.on_tool_chunk: must be callable")
        self.on_tool_chunk = on_tool_chunk
        prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
        self._system = system_message(prompt, instructions)
        self._clock = clock
        self._tiers = dict.fromkeys(TIER_COUNTERS, 0)
        self._closed = False

    # ------------------------------------------------------------ RoutableAgent

    async def release(self, participant_id: str) -> None:
        """Keep the transcript: focus moving elsewhere does not end the session."""

    async def participant_left(self, participant_id: str) -> None:
        """Forget the participant's transcript here and in the store: return once the store
        cleared it (its messages, summary and reclaimed originals, and their journal rows),
        so a router's confirmation means it is gone. ``TimeoutError`` naming the store when
        it did not answer in time (this process forgot it all the same)."""
        await self.transcripts.forget(participant_id)

    async def close(self) -> None:
        self._closed = True
        self.transcripts.close()

    # ------------------------------------------------------------ transcripts

    def transcript(self, participant_id: str) -> Transcript:
        """The participant's transcript (created on first use)."""
        return self.transcripts.transcript(participant_id)

    @property
    def transcripts_evicted(self) -> int:
        """Transcripts dropped: more than ``transcript_mirror.MAX_PARTICIPANTS`` were held."""
        return self.transcripts.evicted

    @property
    def store_refused(self) -> int:
        """Writes the transcript store refused or left unanswered (each followed by a resync)."""
        return self.transcripts.refused

    async def mirrored(self) -> None:
        """Return once every transcript write sent so far was answered (or given up)."""
        await self.transcripts.mirrored()

    def tier_counters(self) -> dict[str, int]:
        """docs/tools.md's counters over every transcript, since this agent started:
        ``toolcall_rounds_total`` tier-1 rounds, ``toolcall_reclaimed`` results reclaimed,
        ``summary_rounds`` summaries applied, ``nothing_to_condense`` and
        ``summarize_failed`` tier-2 outcomes, ``originals_evicted`` originals dropped."""
        return dict(self._tiers)

    def _tally(self, transcript: Transcript, before: tuple[int, ...]) -> None:
        for name, was in zip(TIER_COUNTERS, before):
            self._tiers[name] += getattr(transcript.counters, name) - was

    @staticmethod
    def _counted(transcript: Transcript) -> tuple[int, ...]:
        return tuple(getattr(transcript.counters, name) for name in TIER_COUNTERS)

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered: the tools, then ``extract_compacted_tool_result``."""
        return (*self.toolset.specs(), EXTRACT_TOOL)

    def system_content(self, transcript: Transcript) -> str:
        """The system message of a request over ``transcript`` (its summary, once there is one)."""
        if transcript.summary:
            return compacted_system_message(transcript.summary, self._system)
        return self._system

    def request(self, participant_id: str) -> list[Any]:
        """The messages of the next model call for the participant, as things are now:
        OpenAI's typed chat messages, the transcript's as it holds them."""
        transcript = self.transcript(participant_id)
        context = context_message(self.context.blocks(participant_id), self._clock())
        return [
            {"role": "system", "content": self.system_content(transcript)},
            {"role": "user", "content": context},
            *transcript.all_messages(),
        ]

    async def compact(
        self, participant_id: str, tier: Literal["toolcall", "summary"] = "summary"
    ) -> ToolCallCompactResult | SummaryCompactResult:
        """Run one tier by hand (``/compact`` (docs/tools.md) and ``/compact toolcall``)."""
        if tier not in ("toolcall", "summary"):
            raise ValueError("ToolAgent.compact.tier: must be 'toolcall' or 'summary'")
        async with self.transcripts.lock(participant_id):
            transcript = await self.transcripts.load(
                participant_id, get_logger(participant=participant_id)
            )
            before = self._counted(transcript)
            result: ToolCallCompactResult | SummaryCompactResult
            if tier == "toolcall":
                result = transcript.compact_toolcall(self.compactor.toolcall_keep_max)
            else:
                plan = transcript.plan_summary(self.compactor.summary_keep_max)
                summary = (
                    None if plan is None else await self.summarize(plan.head, transcript.summary)
                )
                result = transcript.apply_summary(plan, summary)
            self._tally(transcript, before)
            answered = self.transcripts.mirror(participant_id, transcript, [])
        if answered is not None:
            await answered  # the store's first answer: journaled, unless it was down
        return result

    async def take_back(self, participant_id: str) -> list[Any]:
        """Drop the participant's last question and everything after it from the transcript
        (``/retry`` and ``/revise`` ask again), and its exchange from the shared context; the
        dropped messages, once the store first answered the rewrite and the context applied
        the retraction (a context that does not answer in time: logged, it is re-sent).
        Waits for a turn in progress to end."""
        async with self.transcripts.lock(participant_id):
            log = get_logger(participant=participant_id)
            transcript = await self.transcripts.load(participant_id, log)
            dropped = transcript.pop_from_last_user_message(inclusive=True)
            turn_id = transcript.turn_ids.pop() if dropped and transcript.turn_ids else None
            answered = self.transcripts.mirror(participant_id, transcript, [])
            if dropped and turn_id is None:
                log.warning(
                    "tools.take_back_untracked",
                    reason="the transcript keeps no id of this turn: the shared context keeps it",
                )
        if answered is not None:
            await answered
        if turn_id is not None:
            try:
                await self.context.retract_exchange(participant_id, turn_id)
            except TimeoutError as error:
                log.warning("tools.retract_late", turn=turn_id, error=str(error))
        return dropped

    async def conversation(self, participant_id: str) -> Conversation:
        """A copy of the participant's conversation with the request's system message
        first, as ``/render`` shows it. Waits for a turn in progress to end."""
        async with self.transcripts.lock(participant_id):
            log = get_logger(participant=participant_id)
            transcript = await self.transcripts.load(participant_id, log)
            conversation = Conversation.loads(transcript.conversation.dumps())
            conversation.set_system_message_content(self.system_content(transcript))
        return conversation

    # ------------------------------------------------------------ the turn

    async def answer(
        self, turn: AgentTurn, *, started: Callable[[], Awaitable[None]]
    ) -> DestinationResult:
        """Run the tool loop for ``turn`` and stream the answer; see the module docstring."""
        if self._closed:
            raise RuntimeError("ToolAgent.answer: the agent is closed")
        route = await answer_prologue(turn, "tools", self.context)
        pid = turn.participant_id
        log = get_logger(actor=route, participant=pid, turn=turn.turn_id)
        await self._discover(log)
        async with self.transcripts.lock(pid):
            transcript = await self.transcripts.load(pid, log)
            transcript.conversation.add_user_message(turn.text, list(turn.images) or None)
            outputs = ResponseOutputs(self.runtime, self.output_topic, source=route)
            parts: list[str] = []
            times = _ModelTimes()
            try:
                async with outputs.reply(
                    pid, request_id=turn.turn_id, timestamp_us=turn.timestamp_us, started=started
                ) as reply:
                    await self._loop(pid, transcript, reply, parts, log, times)
                text = "".join(parts).strip()
                if not text:
                    raise ModelError(self.llm.model, "the answer was empty")
            except BaseException:
                transcript.rollback()
                raise
            # Leaving the reply without an exception means its final frame was published.
            turn_messages = transcript.pending
            transcript.commit(turn.turn_id)
            self.transcripts.mirror(pid, transcript, turn_messages)
        self.context.record_exchange(
            pid,
            turn.text,
            text,
            timestamp_us=turn.timestamp_us if turn.timestamp_us is not None else self._clock(),
            exchange_id=turn.turn_id,
        )
        name = getattr(self.runtime, "name", None)
        stages = DestinationStages(
            name if isinstance(name, str) else None,
            self.llm.model,
            times.request_us,
            times.first_token_us,
            times.first_chunk_us,
            times.usage,
            tuple(times.tools),
            compactions=tuple(times.compactions),
        )
        return DestinationResult(response=text, stages=stages)

    async def _loop(
        self,
        pid: str,
        transcript: Transcript,
        reply: Any,
        parts: list[str],
        log: Any,
        times: _ModelTimes,
    ) -> None:
        specs = self.tool_specs()
        for iteration in range(self.max_iterations):
            began = now_us()
            report = await self._auto_compact(pid, transcript, log)
            if report is not None:
                times.compactions.append(
                    CompactionTime(
                        "tools",
                        report.outcome.value,
                        began,
                        now_us(),
                        len(report.steps),
                        report.still_over,
                    )
                )
            last = iteration == self.max_iterations - 1
            said: list[str] = []
            offered = () if last else specs
            messages = self.request(pid)
            if times.request_us is None:
                times.request_us = now_us()
            async with self.llm.stream(messages, self.options, tools=offered) as stream:
                async for chunk in stream:
                    if times.first_token_us is None:
                        times.first_token_us = now_us()
                    # Text of a later model call continues what was said: a word break between.
                    spoken = chunk
                    if (
                        not said
                        and parts
                        and not parts[-1][-1:].isspace()
                        and not chunk[:1].isspace()
                    ):
                        spoken = f" {chunk}"
                    await reply.send(spoken)
                    if times.first_chunk_us is None:
                        times.first_chunk_us = now_us()
                    said.append(chunk)
                    parts.append(spoken)
            result = stream.result
            usage = stream.usage
            times.usage = add_usage(times.usage, turn_usage(usage, messages, "".join(said)))
            total = None if usage is None else usage.total
            if total is None:  # no usage reported: the tokenizer's count, marked estimated
                estimate = await estimate_total_tokens(self.llm.model, messages, "".join(said))
                transcript.note_usage(estimate, estimated=True)
            else:
                transcript.note_usage(total)
            calls = () if result is None or last else result.tool_calls
            content = "".join(said)
            if not calls:
                if content.strip():
                    _add_reply(transcript, content, (), result)
                if stream.finish_reason != "stop":
                    log.warning("tools.answer_incomplete", finish_reason=stream.finish_reason)
                return
            _add_reply(transcript, content, calls, result)
            replies = await asyncio.gather(
                *(self._timed_call(pid, transcript, call, times) for call in calls)
            )
            for call, outcome in zip(calls, replies):
                transcript.conversation.add_tool_result(call.id, outcome)
                if outcome.error is not None:
                    log.info("tools.call_failed", tool=call.name, call=call.id, error=outcome.error)

    async def _timed_call(
        self, pid: str, transcript: Transcript, call: ToolCall, times: _ModelTimes
    ) -> ToolCallReply:
        """``_call``, noting when the call began and ended for the turn record."""
        began = now_us()
        reply = await self._call(pid, transcript, call)
        times.tools.append(ToolCallTime(call.name, began, now_us(), reply.error is not None))
        return reply

    async def _call(self, pid: str, transcript: Transcript, call: ToolCall) -> ToolCallReply:
        if call.name == EXTRACT_TOOL.name:
            return _extract(transcript, call.arguments)
        observer = self.on_tool_chunk
        on_chunk = None if observer is None else (lambda chunk: observer(pid, call, chunk))
        return await self.toolset.call(self.runtime, call, participant_id=pid, on_chunk=on_chunk)

    async def _auto_compact(
        self, pid: str, transcript: Transcript, log: Any
    ) -> AutoCompactReport | None:
        if not self.compactor.enabled:
            return None
        before = self._counted(transcript)
        report = await self.compactor.auto_compact(Compacting(transcript, self.summarize, pid))
        self._tally(transcript, before)
        if report is not None:
            log.info(
                "tools.compacted",
                outcome=report.outcome.value,
                steps=len(report.steps),
                estimate=round(report.estimate),
                limit=report.limit,
                still_over=report.still_over,
            )
        return report

    async def _discover(self, log: Any) -> None:
        """Add the catalogs of configured servers not yet discovered."""
        for server in list(self.servers):
            try:
                found = await ToolSet.discover(
                    self.runtime,
                    server,
                    timeout_s=self.discovery_timeout_s,
                    call_timeout_s=self.tool_timeout_s,
                )
            except Exception as error:  # the server is not up (yet): its tools are absent this turn
                log.warning(
                    "tools.discovery_failed",
                    server=server,
                    error=f"{type(error).__name__}: {error}",
                )
                continue
            for tool in found:
                if tool.spec().name not in self.toolset:
                    self.toolset.add(tool)
            self.servers.remove(server)


def _add_reply(
    transcript: Transcript, content: str, calls: tuple[ToolCall, ...], result: ChatResult | None
) -> None:
    """The model's reply as the seed's assistant message: its text (None beside tool calls
    with none), its tool calls with their argument strings, its reasoning verbatim under
    the field the model used."""
    conversation = transcript.conversation
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    if result is not None and result.reasoning:
        conversation.reasoning_field = result.reasoning_field or conversation.reasoning_field
        message[conversation.reasoning_field] = result.reasoning
    conversation.add_agent_message(message)


def _extract(transcript: Transcript, arguments: str) -> ToolCallReply:
    try:
        toolcall_id = msgspec.json.decode(arguments or "{}")["toolcall_id"]
        return ToolCallReply(transcript.extract(str(toolcall_id)))
    except UnknownToolCall as error:
        return failed(f"no compacted tool result with ID {error.args[0]!r}")
    except (msgspec.DecodeError, KeyError, TypeError) as error:
        return failed(f'extract_compacted_tool_result needs {{"toolcall_id": ...}}: {error}')
