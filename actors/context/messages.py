"""Bus messages and topics between the context actors (internal to one deployment).

The public wire types (``ConversationContextUpdate``, ``ContextBlock``,
``CompactionPrompts``) live in ``xrmq.schemas``; these carry the context machinery's
own traffic between the manager, the section actors and the compaction workers, so
every field is plain data and the participant always travels in the envelope.

Topics of a deployment are named under its namespace (default ``context``) so that two
managers with different configurations can share one bus:

==========================================  ======================  ==============================
topic                                       message                 handled by
==========================================  ======================  ==============================
``<topic name>`` (the context topic itself)  ConversationContextUpdate  that topic's section actor
``<ns>.topic.<topic>.write``                TopicWrite              that topic's section actor
``<ns>.topic.<topic>.clear`` (ask)          ClearSection            that topic's section actor
``<ns>.topic.<topic>.result``               CompactionDone          that topic's section actor
``<ns>.dialogue.write``                     RecordExchanges         the participant's dialogue actor
                                            (exchanges, retractions)
``<ns>.dialogue.clear`` (ask)               ClearSection            the participant's dialogue actor
``<ns>.dialogue.result``                    CompactionDone          the participant's dialogue actor
``<ns>.worker.<i>.jobs``                    CompactionJob           compaction worker ``i``
``<ns>.worker.<i>.cancel`` (ask)            CancelJobs              compaction worker ``i``
``<ns>.view``                               SectionView             every manager's replica
``<ns>.replica.<manager id>`` (ask)         ForgetParticipant       one manager's replica
``<ns>.dialogue.load``, ``...topic.<t>.load``  LoadSection           the section's actor
``<ns>.dialogue.migrate`` (ask)             LoadSection             the participant's dialogue actor
``<ns>.dialogue.compact``, ``...<t>.compact``  CompactSection        the section's actor
``<ns>.replica.<manager id>.compacted``     CompactReport           one manager's replica
``<ns>.host.started``                       HostStarted             every manager's replica
``<ns>.host.<i>.sync`` (ask)                HostSync                section host ``i`` (its views)
``<ns>.host.<i>.dump`` (ask)                HostSync                section host ``i`` (its states)
==========================================  ======================  ==============================

A section host is one process (shard) of section actors, with its journal. Its views
carry its index and epoch (incarnation); a new epoch tells every replica that the host
restarted, and the replica resyncs from the host's full snapshot (``HostSync``), page by
page, each page within the bus's message limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cached_property

import msgspec

from xrmq.schemas import ContextBlock
from xrmq.schemas._validation import check_name
from xrmq.topics import Topic, context_topic

from .compaction import CompactionRequest, CompactionResult, JobRef
from .dump import ParticipantDump, SectionDump


class ExchangeRecord(msgspec.Struct, frozen=True):
    """One completed exchange; ``identity`` is ``engine.exchange_identity`` of it."""

    identity: bytes
    request: str
    answer: str
    timestamp_us: int


class RecordExchanges(msgspec.Struct, frozen=True):
    """A manager's write to a participant's dialogue: exchanges, oldest first, then the
    identities of exchanges to take back (``retracted``: a retried or revised question).

    ``writer`` and ``seq`` identify the write; the section acknowledges it in its next view.
    A retraction travels as a write so it keeps its order with the exchanges, is journaled
    and re-sent like them, and reaches every replica in the section's next view.
    """

    writer: str
    seq: int
    exchanges: tuple[ExchangeRecord, ...]
    retracted: tuple[bytes, ...] = ()


class TopicWrite(msgspec.Struct, frozen=True):
    """A manager's ``update()``: the text with its recorded time (sensors publish
    ``ConversationContextUpdate`` on the topic itself and are dated by the envelope)."""

    writer: str
    seq: int
    text: str
    timestamp_us: int


class ClearSection(msgspec.Struct, frozen=True):
    """Forget the envelope's participant (all participants when it has none).

    ``close`` also makes a topic actor drop every later update. The reply is ``Cleared``.
    """

    close: bool = False


class JobAt(msgspec.Struct, frozen=True):
    """A compaction job and the workers it was sent to (a retried job went to several)."""

    job: JobRef
    participant_id: str
    workers: tuple[int, ...]


class Cleared(msgspec.Struct, frozen=True):
    """What a section forgot: the generations of the states, and their jobs to cancel."""

    generations: tuple[str, ...] = ()
    jobs: tuple[JobAt, ...] = ()


class CompactionJob(msgspec.Struct, frozen=True):
    """A request for one worker; the result goes to ``reply_topic`` (a ``CompactionDone``)."""

    request: CompactionRequest
    reply_topic: str
    attempt: int = 0


class CompactionDone(msgspec.Struct, frozen=True):
    """A worker's result for a job."""

    result: CompactionResult
    worker: int


class CancelJobs(msgspec.Struct, frozen=True):
    """Stop these jobs (queued or running) at one worker; the reply is how many it stopped,
    sent after their model streams are closed."""

    jobs: tuple[JobRef, ...]


class SectionView(msgspec.Struct, frozen=True):
    """One section of one participant as rendered into prompts (the envelope names the participant).

    ``generation`` names the section state (new after every clear), ``revision`` orders
    views of one generation. ``writer``/``seq`` name the latest manager write the
    section has applied for this participant, and ``acks`` the last one of each writer
    (``view_ack``), so every manager learns its write was applied even when another's
    came in the same turn.
    """

    section: str
    dialogue: bool
    generation: str
    revision: int
    blocks: tuple[ContextBlock, ...]
    writer: str = ""
    seq: int = 0
    host: int = 0
    """The index of the section host (context process) that published it."""
    epoch: int = 0
    """That host's incarnation (its runtime's epoch); 0 for a view rendered locally."""
    acks: tuple[tuple[str, int], ...] = ()
    """(writer, seq) of the last write applied of each recent writer."""


def view_ack(view: SectionView, writer: str) -> int:
    """The seq of ``writer``'s last write that ``view`` shows applied (0: none)."""
    for name, seq in view.acks:
        if name == writer:
            return seq
    return view.seq if view.writer == writer else 0


class ForgetParticipant(msgspec.Struct, frozen=True):
    """Drop the replica's views of these (cleared) generations for the envelope's participant."""

    generations: tuple[str, ...]


class LoadSection(msgspec.Struct, frozen=True):
    """A manager's ``load()`` of one section of the envelope's participant (acked by a view)."""

    writer: str
    seq: int
    dump: SectionDump


class CompactSection(msgspec.Struct, frozen=True):
    """A manager's ``compact()`` of one section; answered by a ``CompactReport``."""

    writer: str
    seq: int


class CompactReport(msgspec.Struct, frozen=True):
    """How a manual compaction of one section ended: ``CompactStatus`` values."""

    section: str
    seq: int
    status: str
    detail: str = ""
    made_by: tuple[str, ...] = ()
    """COMPACTED: what wrote the summaries (``manual.MAKERS``: ``model``, ``extractive``)."""


class HostStarted(msgspec.Struct, frozen=True):
    """A section host finished recovery (published once its journal is restored)."""

    host: int
    epoch: int
    participants: int


class HostSync(msgspec.Struct, frozen=True):
    """Ask a section host for its snapshot (views, or dumps), or one participant's part.

    A snapshot comes in pages (a host holds more than one message carries): the
    page of the participants after ``after`` in name order, in at most ``page_bytes``
    (0: the host's own message limit; a smaller one is the asker's).
    """

    participant_id: str | None = None
    after: str | None = None
    page_bytes: int = 0


class HostViews(msgspec.Struct, frozen=True):
    """A page of a host's snapshot (or one participant's views), as (participant, view).

    A participant's views are all in one page. ``next_after`` is the ``after`` of the next
    page; None: this was the last.
    """

    host: int
    epoch: int
    views: tuple[tuple[str, SectionView], ...]
    next_after: str | None = None


class HostDump(msgspec.Struct, frozen=True):
    """A page of a host's section states in dump form (or one participant's), paged as
    ``HostViews``: ``next_after`` is the ``after`` of the next page, None after the last."""

    participants: tuple[ParticipantDump, ...]
    next_after: str | None = None


_SUMMARIZER_ID = re.compile(r"[0-9a-f]{12}\.result")


class ContextTopics:
    """The topics of one deployment's namespace (see the module docstring)."""

    def __init__(self, namespace: str) -> None:
        check_name(namespace, "namespace")
        self.namespace = namespace

    @cached_property
    def view(self) -> Topic[SectionView]:
        return Topic(f"{self.namespace}.view", SectionView)

    @cached_property
    def dialogue_write(self) -> Topic[RecordExchanges]:
        return Topic(f"{self.namespace}.dialogue.write", RecordExchanges)

    @cached_property
    def dialogue_clear(self) -> Topic[ClearSection]:
        return Topic(f"{self.namespace}.dialogue.clear", ClearSection)

    @cached_property
    def dialogue_result(self) -> Topic[CompactionDone]:
        return Topic(f"{self.namespace}.dialogue.result", CompactionDone)

    def updates(self, topic: str) -> Topic:
        """The context topic itself, where sensors publish."""
        return context_topic(topic)

    def topic_write(self, topic: str) -> Topic[TopicWrite]:
        return Topic(f"{self.namespace}.topic.{topic}.write", TopicWrite)

    def topic_clear(self, topic: str) -> Topic[ClearSection]:
        return Topic(f"{self.namespace}.topic.{topic}.clear", ClearSection)

    def topic_result(self, topic: str) -> Topic[CompactionDone]:
        return Topic(f"{self.namespace}.topic.{topic}.result", CompactionDone)

    def worker_jobs(self, index: int) -> Topic[CompactionJob]:
        return Topic(f"{self.namespace}.worker.{index}.jobs", CompactionJob)

    def worker_cancel(self, index: int) -> Topic[CancelJobs]:
        return Topic(f"{self.namespace}.worker.{index}.cancel", CancelJobs)

    def replica(self, manager_id: str) -> Topic[ForgetParticipant]:
        return Topic(f"{self.namespace}.replica.{manager_id}", ForgetParticipant)

    def compacted(self, manager_id: str) -> Topic[CompactReport]:
        return Topic(f"{self.namespace}.replica.{manager_id}.compacted", CompactReport)

    @cached_property
    def dialogue_load(self) -> Topic[LoadSection]:
        return Topic(f"{self.namespace}.dialogue.load", LoadSection)

    @cached_property
    def dialogue_migrate(self) -> Topic[LoadSection]:
        """A dialogue state found in another shard's journal, sent to its owner (answered
        once the owner journaled it)."""
        return Topic(f"{self.namespace}.dialogue.migrate", LoadSection)

    @cached_property
    def dialogue_compact(self) -> Topic[CompactSection]:
        return Topic(f"{self.namespace}.dialogue.compact", CompactSection)

    def topic_load(self, topic: str) -> Topic[LoadSection]:
        return Topic(f"{self.namespace}.topic.{topic}.load", LoadSection)

    def topic_compact(self, topic: str) -> Topic[CompactSection]:
        return Topic(f"{self.namespace}.topic.{topic}.compact", CompactSection)

    @cached_property
    def host_started(self) -> Topic[HostStarted]:
        return Topic(f"{self.namespace}.host.started", HostStarted)

    def host_sync(self, host: int) -> Topic[HostSync]:
        return Topic(f"{self.namespace}.host.{host}.sync", HostSync)

    def host_dump(self, host: int) -> Topic[HostSync]:
        return Topic(f"{self.namespace}.host.{host}.dump", HostSync)

    def is_summarizer_result(self, name: str) -> bool:
        """Whether ``name`` is a tools summarizer's result topic (``<ns>.tools.<12 hex
        digits>.result``, one per ``actors.tools.workers.WorkerSummarizer``): the only
        result topic outside ``result_topics`` a worker publishes on (it keeps none)."""
        prefix = f"{self.namespace}.tools."
        return name.startswith(prefix) and bool(_SUMMARIZER_ID.fullmatch(name, len(prefix)))

    def result_topics(self, topic_names: Iterable[str]) -> dict[str, Topic[CompactionDone]]:
        """The exact result topics of a deployment whose context topics are ``topic_names``:
        the dialogue's and each topic's, by name. A worker publishes a result on one of
        these and nowhere else, so a job naming any other reply topic is refused (and a
        flood of made-up names binds nothing)."""
        topics = [self.dialogue_result, *(self.topic_result(name) for name in topic_names)]
        return {topic.name: topic for topic in topics}
