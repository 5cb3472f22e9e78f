"""``ToolAgent``: a routed destination (a ``RoutableAgent``) that answers by calling tools.

A turn runs the tool loop: the model is asked with the tools offered; when it asks for
tool calls they run in parallel (each a bus ask for a remote tool), their results go
back to the model, and so on until it answers without calls or ``max_iterations``
model calls were made (the last one then offers no tools, so it answers).

A request is: the system message (system prompt, instructions, and the transcript's
summary with docs/tools.md's compaction note once there is one); the participant's shared
context (``ContextManager.blocks``, then the current time), as ``Conversation``
renders it; then the participant's transcript (earlier turns with their tool calls and
results, then this turn's).

Framing is docs/context.md's, as in ``Conversation``: the first nonblank chunk awaits
``started()``; once a chunk was published an empty final frame closes the reply,
whether the answer completed, failed or was cancelled; the exchange is recorded in the
shared context, and the turn committed to the transcript, only after the final frame.
A cancelled turn (a barge-in) cancels its running tool calls, at their servers too,
and records nothing.

Before each model call the ``AutoCompactor`` (docs/tools.md) checks the transcript; tier 2
summaries come from ``summarize`` (the compaction workers or a model). The built-in
tool ``extract_compacted_tool_result`` returns a reclaimed original.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import msgspec

from xrmq.actors.clock import now_us
from xrmq.actors.conversation import ParticipantContext, context_message, system_message
from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.models import ChatMessage, ChatOptions, LLMService, ModelError, ToolCall, ToolSpec
from xrmq.actors.routing.agent import current_turn_context
from xrmq.actors.runtime import get_logger
from xrmq.schemas import Admission, AgentTurn, DestinationResult, ResponseOutput, RoutingAid
from xrmq.schemas._validation import check_positive
from xrmq.schemas.tools import ToolCallReply
from xrmq.topics import Topic

from .client import RemoteTool, ToolSet
from .policy import AutoCompactor, AutoCompactReport, Summarize
from .store import TranscriptLoad, TranscriptState, TranscriptTopics, TranscriptWrite, restore
from .summary import COMPACTED_NOTE, llm_summarizer
from .tiers import SummaryCompactResult, ToolCallCompactResult
from .tool import Tool, failed
from .transcript import Transcript, UnknownToolCall

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

MAX_PARTICIPANTS = 10_000
"""Transcripts held at most; the least recently used beyond it is dropped, and counted."""


class ToolAgent:
    """The tool-calling destination; see the module docstring.

    ``tools`` are local ``Tool`` s and ``RemoteTool`` s; ``servers`` names tool servers
    whose whole catalogs are discovered over the bus before the first turn (a server
    that does not answer is tried again on the next turn). ``context``, ``runtime``,
    ``output_topic``, ``instructions``, ``system_prompt``, ``routing``, ``options`` and
    ``clock`` are as for ``Conversation``. ``compactor`` holds docs/tools.md's parameters;
    ``summarize`` writes tier-2 summaries (default: ``llm`` itself). Calls to the tools
    of ``servers`` time out after ``tool_timeout_s``; discovery after
    ``discovery_timeout_s``. With ``transcripts`` (a store name) every transcript is
    mirrored to the keyed ``TranscriptActor`` s of that store (``store``) and loaded
    from them when this process does not hold it.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        context: ParticipantContext,
        runtime: Any,
        output_topic: Topic[ResponseOutput],
        tools: Sequence[Tool | RemoteTool] = (),
        servers: Sequence[str] = (),
        instructions: str = "",
        system_prompt: str | None = None,
        routing: RoutingAid | None = None,
        options: ChatOptions | None = None,
        max_iterations: int = 8,
        compactor: AutoCompactor | None = None,
        summarize: Summarize | None = None,
        discovery_timeout_s: float = 2.0,
        tool_timeout_s: float = 10.0,
        transcripts: str | None = None,
        clock: Callable[[], int] = now_us,
    ) -> None:
        if not callable(getattr(llm, "stream", None)):
            raise ValueError("ToolAgent.llm: must be an LLMService")
        for method in ("blocks", "record_exchange", "reconcile_history"):
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
        self.compactor = AutoCompactor() if compactor is None else compactor
        self.summarize = llm_summarizer(llm) if summarize is None else summarize
        self.discovery_timeout_s = discovery_timeout_s
        self.tool_timeout_s = tool_timeout_s
        self.store = None if transcripts is None else TranscriptTopics.of(transcripts)
        prompt = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
        self._system = system_message(prompt, instructions)
        self._clock = clock
        self._transcripts: OrderedDict[str, Transcript] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self.transcripts_evicted = 0
        self._closed = False

    # ------------------------------------------------------------ RoutableAgent

    def routing_aid(self, participant_id: str) -> RoutingAid:
        if self._closed:
            return RoutingAid(
                self.routing.description,
                eligible=False,
                priority=self.routing.priority,
                keywords=self.routing.keywords,
            )
        return self.routing

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        return Admission("decline" if self._closed else "accept")

    async def release(self, participant_id: str) -> None:
        """Keep the transcript: focus moving elsewhere does not end the session."""

    async def participant_left(self, participant_id: str) -> None:
        """Forget the participant's transcript (in the store too)."""
        self._transcripts.pop(participant_id, None)
        self._locks.pop(participant_id, None)
        self._write(participant_id, TranscriptWrite("clear", ()))

    async def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------ transcripts

    def transcript(self, participant_id: str) -> Transcript:
        """The participant's transcript (created on first use)."""
        transcript = self._transcripts.get(participant_id)
        if transcript is None:
            transcript = self._transcripts[participant_id] = Transcript()
            while len(self._transcripts) > MAX_PARTICIPANTS:
                dropped, _ = self._transcripts.popitem(last=False)
                self._locks.pop(dropped, None)
                self.transcripts_evicted += 1
        else:
            self._transcripts.move_to_end(participant_id)
        return transcript

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered: the tools, then ``extract_compacted_tool_result``."""
        return (*self.toolset.specs(), EXTRACT_TOOL)

    def request(self, participant_id: str) -> list[ChatMessage]:
        """The messages of the next model call for the participant, as things are now."""
        transcript = self.transcript(participant_id)
        system = self._system
        if transcript.summary:
            system = f"{system}\n\n{COMPACTED_NOTE}\n\n{transcript.summary}"
        return [
            ChatMessage("system", system),
            ChatMessage(
                "user", context_message(self.context.blocks(participant_id), self._clock())
            ),
            *transcript.all_messages(),
        ]

    async def compact(
        self, participant_id: str, tier: Literal["toolcall", "summary"] = "summary"
    ) -> ToolCallCompactResult | SummaryCompactResult:
        """Run one tier by hand (``/compact`` (docs/tools.md) and ``/compact toolcall``)."""
        transcript = self.transcript(participant_id)
        async with self._lock(participant_id):
            if tier == "toolcall":
                reclaimed = transcript.compact_toolcall(self.compactor.toolcall_keep_max)
                self._mirror(participant_id, transcript, [])
                return reclaimed
            if tier != "summary":
                raise ValueError("ToolAgent.compact.tier: must be 'toolcall' or 'summary'")
            plan = transcript.plan_summary(self.compactor.summary_keep_max)
            summary = None if plan is None else await self.summarize(plan.head, transcript.summary)
            result = transcript.apply_summary(plan, summary)
            self._mirror(participant_id, transcript, [])
            return result

    def _lock(self, participant_id: str) -> asyncio.Lock:
        lock = self._locks.get(participant_id)
        if lock is None:
            lock = self._locks[participant_id] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------ the turn

    async def answer(
        self, turn: AgentTurn, *, started: Callable[[], Awaitable[None]]
    ) -> DestinationResult:
        """Run the tool loop for ``turn`` and stream the answer; see the module docstring."""
        if self._closed:
            raise RuntimeError("ToolAgent.answer: the agent is closed")
        routed = current_turn_context()
        route = routed.route if routed is not None else "tools"
        pid = turn.participant_id
        log = get_logger(actor=route, participant=pid, turn=turn.turn_id)
        if turn.history:
            self.context.reconcile_history(
                pid,
                [
                    (exchange.request, exchange.response, exchange.timestamp_us)
                    for exchange in turn.history
                ],
                exchange_ids=[exchange.exchange_id for exchange in turn.history],
            )
        await self._discover(log)
        async with self._lock(pid):
            transcript = await self._load(pid, log)
            transcript.append(ChatMessage("user", turn.text))
            outputs = ResponseOutputs(self.runtime, self.output_topic, source=route)
            parts: list[str] = []
            try:
                async with outputs.reply(
                    pid, request_id=turn.turn_id, timestamp_us=turn.timestamp_us, started=started
                ) as reply:
                    await self._loop(pid, transcript, reply, parts, log)
                text = "".join(parts).strip()
                if not text:
                    raise ModelError(self.llm.model, "the answer was empty")
            except BaseException:
                transcript.rollback()
                raise
            # Leaving the reply without an exception means its final frame was published.
            turn_messages = list(transcript.pending)
            transcript.commit()
            self._mirror(pid, transcript, turn_messages)
        self.context.record_exchange(
            pid,
            turn.text,
            text,
            timestamp_us=turn.timestamp_us if turn.timestamp_us is not None else self._clock(),
            exchange_id=turn.turn_id,
        )
        return DestinationResult(response=text)

    async def _loop(
        self, pid: str, transcript: Transcript, reply: Any, parts: list[str], log: Any
    ) -> None:
        specs = self.tool_specs()
        for iteration in range(self.max_iterations):
            await self._auto_compact(transcript, log)
            last = iteration == self.max_iterations - 1
            said: list[str] = []
            offered = () if last else specs
            async with self.llm.stream(self.request(pid), self.options, tools=offered) as stream:
                async for chunk in stream:
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
                    said.append(chunk)
                    parts.append(spoken)
            result = stream.result
            usage = stream.usage
            transcript.note_usage(usage.total if usage is not None else None)
            calls = () if result is None or last else result.tool_calls
            reasoning = None if result is None else result.reasoning
            content = "".join(said)
            if not calls:
                if content.strip():
                    transcript.append(ChatMessage("assistant", content, reasoning=reasoning))
                if stream.finish_reason != "stop":
                    log.warning("tools.answer_incomplete", finish_reason=stream.finish_reason)
                return
            transcript.append(
                ChatMessage("assistant", content, tool_calls=calls, reasoning=reasoning)
            )
            replies = await asyncio.gather(*(self._call(pid, transcript, call) for call in calls))
            transcript.append(
                *(ChatMessage("tool", r.content, tool_call_id=c.id) for c, r in zip(calls, replies))
            )
            for call, outcome in zip(calls, replies):
                if outcome.error is not None:
                    log.info("tools.call_failed", tool=call.name, call=call.id, error=outcome.error)

    async def _call(self, pid: str, transcript: Transcript, call: ToolCall) -> ToolCallReply:
        if call.name == EXTRACT_TOOL.name:
            return _extract(transcript, call.arguments)
        return await self.toolset.call(self.runtime, call, participant_id=pid)

    async def _load(self, pid: str, log: Any) -> Transcript:
        """The participant's transcript: held here, else loaded from the store."""
        if pid in self._transcripts or self.store is None:
            return self.transcript(pid)
        try:
            state = await self.runtime.ask(
                self.store.load,
                TranscriptLoad(),
                reply_type=TranscriptState,
                participant_id=pid,
                timeout=self.discovery_timeout_s,
            )
        except Exception as error:  # the store is not up: start afresh, say so
            log.warning("tools.transcript_load_failed", error=f"{type(error).__name__}: {error}")
            return self.transcript(pid)
        self.transcript(pid)
        restored = self._transcripts[pid] = restore(state)
        return restored

    def _mirror(self, pid: str, transcript: Transcript, turn_messages: list[ChatMessage]) -> None:
        """Send the store what changed: the whole transcript after a rewrite, else the turn."""
        if self.store is None:
            return
        rewritten = transcript.take_rewritten()
        messages = tuple(transcript.messages) if rewritten else tuple(turn_messages)
        self._write(
            pid,
            TranscriptWrite(
                "replace" if rewritten else "append",
                messages,
                transcript.summary,
                transcript.total_tokens,
                transcript.take_new_originals(),
                transcript.counters.tool_rounds,
                transcript.counters.summary_rounds,
            ),
        )

    def _write(self, pid: str, write: TranscriptWrite) -> None:
        if self.store is not None and getattr(self.runtime, "running", False):
            self.runtime.send(self.store.write, write, participant_id=pid)

    async def _auto_compact(self, transcript: Transcript, log: Any) -> AutoCompactReport | None:
        report = await self.compactor.auto_compact(transcript, self.summarize)
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


def _extract(transcript: Transcript, arguments: str) -> ToolCallReply:
    try:
        toolcall_id = msgspec.json.decode(arguments or "{}")["toolcall_id"]
        return ToolCallReply(transcript.extract(str(toolcall_id)))
    except UnknownToolCall as error:
        return failed(f"no compacted tool result with ID {error.args[0]!r}")
    except (msgspec.DecodeError, KeyError, TypeError) as error:
        return failed(f'extract_compacted_tool_result needs {{"toolcall_id": ...}}: {error}')
