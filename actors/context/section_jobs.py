"""Where a section's compaction jobs go: one worker each, retried elsewhere on a timeout.

Compaction jobs go to one worker each (``plan.compaction_workers`` mailboxes, chosen by
a stable hash of participant, section and job number), so one participant's jobs spread
over the pool without a coordinator. A job without a result after
``compaction_timeout_s`` (a slow or dead worker) is cancelled there and sent to the next
worker; the first result wins and later copies are cancelled or stale. When every
worker was tried the job fails (``gave_up``: the section keeps its entries and retries
after its next entry). Nothing is lost meanwhile: entries stay until a summary replaces
them.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Mapping

from structlog.typing import FilteringBoundLogger

from xrmq.topics import Topic

from .compaction import CompactionRequest, CompactionResult, JobRef
from .engine import Section
from .messages import CancelJobs, CompactionDone, CompactionJob
from .plan import ContextPlan
from .section_records import JobOut, ParticipantRecord
from .state import ApplyStatus


class CompactionDispatch:
    """The compaction jobs of one section host out at the workers, and their timers."""

    def __init__(
        self,
        section: Section,
        plan: ContextPlan,
        result_topic: Topic,
        participants: Mapping[str, ParticipantRecord],
        *,
        send: Callable[[Topic, object, str], None],
        log: Callable[[str], FilteringBoundLogger],
        gave_up: Callable[[str, ParticipantRecord, CompactionResult], None],
    ) -> None:
        self._section = section
        self._plan = plan
        self._result_topic = result_topic
        self._participants = participants
        self._send = send
        self._log = log
        self._gave_up = gave_up
        """Applies the failure of a job every worker timed out on."""

    def dispatch(
        self, participant_id: str, record: ParticipantRecord, request: CompactionRequest
    ) -> None:
        """Send ``request`` to its worker and start its timer."""
        workers = self._plan.compaction_workers
        seed = zlib.crc32(f"{self._section.spec.name}\x00{participant_id}".encode())
        worker = (seed + request.job.job_id) % workers
        timer = asyncio.get_running_loop().call_later(
            self._plan.compaction_timeout_s, self._timed_out, participant_id, request.job
        )
        record.job = JobOut(request.job, worker, timer)
        self._send_job(participant_id, request, worker, attempt=0)

    def settle(self, participant_id: str, record: ParticipantRecord, done: CompactionDone) -> None:
        """A result of the record's job arrived: stop its timer and cancel its copies
        still running at the other workers it was sent to."""
        job = record.job
        if job is None or job.job != done.result.job:
            return
        job.timer.cancel()
        record.job = None
        for worker in job.workers:
            if worker != done.worker:  # a retried copy still running elsewhere
                self._send(
                    self._plan.topics.worker_cancel(worker), CancelJobs((job.job,)), participant_id
                )

    def _send_job(
        self, participant_id: str, request: CompactionRequest, worker: int, attempt: int
    ) -> None:
        job = CompactionJob(request, self._result_topic.name, attempt)
        self._send(self._plan.topics.worker_jobs(worker), job, participant_id)

    def _timed_out(self, participant_id: str, job: JobRef) -> None:
        record = self._participants.get(participant_id)
        if record is None or record.job is None or record.job.job != job:
            return
        pending = record.state.pending
        tried = record.job.workers
        log = self._log(participant_id)
        self._send(self._plan.topics.worker_cancel(tried[-1]), CancelJobs((job,)), participant_id)
        if pending is not None and len(tried) < self._plan.compaction_workers:
            worker = (tried[0] + len(tried)) % self._plan.compaction_workers
            log.warning(
                "compaction.retry", job=job.job_id, timed_out_worker=tried[-1], worker=worker
            )
            tried.append(worker)
            record.job.timer = asyncio.get_running_loop().call_later(
                self._plan.compaction_timeout_s, self._timed_out, participant_id, job
            )
            self._send_job(participant_id, pending.request, worker, attempt=len(tried) - 1)
            return
        log.warning("compaction.gave_up", job=job.job_id, workers=list(tried))
        record.job = None
        result = CompactionResult(
            job, error=f"timeout after {self._plan.compaction_timeout_s}s at workers {tried}"
        )
        self._gave_up(participant_id, record, result)


def log_status(log: FilteringBoundLogger, status: ApplyStatus, result: CompactionResult) -> None:
    """Log how a compaction result was applied (a warning for what the section refused)."""
    if status in (ApplyStatus.FAILED, ApplyStatus.REJECTED):
        log.warning(
            f"compaction.{status.value}",
            job=result.job.job_id,
            error=result.error,
            finish_reason=result.finish_reason,
            empty=not result.text.strip(),
        )
    elif status is ApplyStatus.CLIPPED:
        log.warning("compaction.clipped", job=result.job.job_id)
    elif status is ApplyStatus.STALE:
        log.info("compaction.stale", job=result.job.job_id)
    else:
        log.debug(f"compaction.{status.value}", job=result.job.job_id)
