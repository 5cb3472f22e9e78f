"""Summary guards: what a section does with a model's summary before it replaces anything.

A small model may return the previous summary again (``frozen``), describe the material
without the values people said (``lossy``), be cut off, or shorten a long summary by
dropping values. Guarded (``CompactionSettings.guarded``), every model summary is checked
against what it replaces (``salience.summary_problem``) and a failed one is counted by
cause and handled by the failure ladder instead of replacing the entries:

1. the material's first failure waits for the section's next entry (the seed's "retried
   after the section's next entry"), and the retry is never the same request again;
2. its second asks at once for a smaller batch;
3. its third (or a failure no smaller batch can follow) compacts the batch with the
   extractive summariser (``salience.extractive_summary``, no model), which backs the
   model off for the next 0, 1, 3, 7 (at most ``MAX_MODEL_SKIPS``) compactions.

A condensed summary (or the clipped one a failed condense leaves) that keeps less than
``MIN_KEPT_SHARE`` of the long summary's values is replaced by the extractive summary
of the long one, so the condense step cannot drop values either. ``state.summary_by``
records what made the summary. Unguarded, a failure waits for the next entry and nothing is checked.

Pure: the guard mutates the ``SectionState`` it is given and returns what happened.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from .clip import clip_middle, utf8_size
from .compaction import compact_message
from .salience import SummaryProblem, extractive_summary, summary_problem
from .state import ApplyStatus, CompactionSettings, PendingJob, SectionSpec, SectionState

MODEL_ATTEMPTS = 3
"""Model requests for the same material before the extractive fallback compacts it: the
batch, a different or smaller batch after the next entry, then at once a smaller one."""

MAX_MODEL_SKIPS = 8
"""Backoff cap: compactions made by the fallback, without asking the model, after a run of
fallbacks (1, 3, 7, then 8 after the second, third, fourth fallback in a row)."""


def message_digest(message: str) -> bytes:
    """Digest of a request's user message: equal digests, equal requests (the prompts are
    fixed per section)."""
    return hashlib.blake2b(message.encode(), digest_size=12).digest()


def request_digest(summary: str, texts: Sequence[str]) -> bytes:
    """Digest of the compact request for ``texts`` after ``summary``."""
    return message_digest(compact_message(summary, texts))


def entry_texts(state: SectionState, entry_ids: Sequence[int]) -> list[str]:
    """The texts of the entries with ``entry_ids``, in the section's order."""
    wanted = set(entry_ids)
    return [entry.text for entry in state.entries if entry.entry_id in wanted]


def replace_summary(state: SectionState, summary: str, entry_ids: Sequence[int]) -> None:
    """``summary`` replaces the summary and the entries ``entry_ids`` it covers."""
    covered = set(entry_ids)
    state.summary = summary
    state.entries = [entry for entry in state.entries if entry.entry_id not in covered]
    state.backlog = [entry_id for entry_id in state.backlog if entry_id not in covered]
    state.revision += 1


class SummaryGuard(msgspec.Struct, frozen=True):
    """The guard of one configured section; see the module docstring."""

    spec: SectionSpec
    settings: CompactionSettings

    def check(
        self, state: SectionState, text: str, entry_ids: tuple[int, ...]
    ) -> SummaryProblem | None:
        """Guarded: why ``text`` must not replace the entries (and the summary), counted."""
        if not self.settings.guarded:
            return None
        problem = summary_problem(
            text, state.summary, entry_texts(state, entry_ids), self.spec.summary_limit_bytes
        )
        self._count(state, problem)
        return problem

    def failed(
        self,
        state: SectionState,
        pending: PendingJob,
        problem: SummaryProblem | None,
        eligible: Sequence[int],
    ) -> ApplyStatus:
        """A compact request failed (or its summary was refused): keep the entries, and
        take the ladder's next step (see the module docstring); ``eligible``: the ids a new
        run would take."""
        status = ApplyStatus.FAILED if problem is None else ApplyStatus.REJECTED
        if not self.settings.guarded:
            state.backlog = []
            state.awaiting_entry = True
            return status
        state.failures += 1
        state.failed_request = message_digest(pending.request.user_message)
        if state.failures == 1:
            state.backlog = []
            state.awaiting_entry = True
            return status
        if state.failures < MODEL_ATTEMPTS and len(pending.entry_ids) > 1:
            state.batch_cap = len(pending.entry_ids) // 2
            if not state.backlog:
                state.backlog = list(eligible)
            return status
        self.fallback(state, list(pending.entry_ids))
        return ApplyStatus.FALLBACK

    def fallback(
        self, state: SectionState, entry_ids: Sequence[int], *, backoff: bool = False
    ) -> None:
        """Compact ``entry_ids`` with the extractive summariser (no model) and continue the
        run with the rest. A fallback the model's failures caused (not ``backoff``) backs
        the model off."""
        texts = entry_texts(state, entry_ids)
        room = self.settings.input_budget_bytes - utf8_size(state.summary)
        if len(texts) == 1 and utf8_size(texts[0]) > room:
            texts = [clip_middle(texts[0], room)]
        material = compact_message(state.summary, texts)
        summary = extractive_summary(material, self.spec.summary_limit_bytes)
        replace_summary(state, summary, tuple(entry_ids))
        state.summary_by = "extractive"
        state.fallbacks += 1
        if not backoff:
            state.fallback_streak += 1
            state.model_skips = min(2 ** (state.fallback_streak - 1) - 1, MAX_MODEL_SKIPS)
        reset_failures(state)

    def accept(self, state: SectionState, text: str, entry_ids: tuple[int, ...]) -> None:
        """The model's summary ``text`` replaces the summary and ``entry_ids``."""
        replace_summary(state, text, entry_ids)
        if self.settings.guarded:
            state.summary_by = "model"
            state.fallback_streak = 0
            reset_failures(state)

    def condensed(self, state: SectionState, text: str, pending: PendingJob) -> bool:
        """Guarded: False, counted as ``lossy``, when ``text`` (a condensed summary, or the
        clip a failed condense leaves) keeps too few of the long summary's values; the
        long summary's extractive summary then replaces the summary and the entries."""
        if not self.settings.guarded:
            return True
        limit = self.spec.summary_limit_bytes
        problem = summary_problem(text, "", [pending.candidate], limit)
        if problem is None:
            return True
        self._count(state, problem)
        replace_summary(state, extractive_summary(pending.candidate, limit), pending.entry_ids)
        state.summary_by = "extractive"
        state.fallbacks += 1
        reset_failures(state)
        return False

    @staticmethod
    def _count(state: SectionState, problem: SummaryProblem | None) -> None:
        if problem == "frozen":
            state.frozen_summaries += 1
        elif problem == "lossy":
            state.lossy_summaries += 1


def reset_failures(state: SectionState) -> None:
    """Forget the material's failures (it was compacted)."""
    state.failures = 0
    state.failed_request = b""
    state.batch_cap = 0
    state.awaiting_entry = False
