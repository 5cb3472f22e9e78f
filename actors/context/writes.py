"""The writes a ContextManager sent and the acknowledgements it waits for.

Every write a section acknowledges (an exchange, a topic update, a loaded section) gets a
sequence number, unique for the manager, and is kept here until the section's view
acknowledges it (``messages.view_ack``): a section host that restarts before it did is
sent it again (``unacknowledged``), and the section applies it once (exchanges by
identity, other writes by their sequence number). A caller that waits for its write
(``update``, ``load``) waits on a future this table resolves when the acknowledgement
arrives, when the participant is cleared, or with an error when the runtime stops.
Manual compactions (``compact``) wait on their section's report the same way.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from xrmq.actors.runtime import RuntimeClosedError
from xrmq.topics import Topic

from .hosting import ManagerRuntime
from .messages import CompactReport

Match = Callable[[str, str, int], bool]
"""Which waiters to release: ``(section, participant, seq) -> bool``."""


class Writes:
    """The manager's writes in flight (to re-send after a host restarts) and its waiters."""

    def __init__(self, runtime: ManagerRuntime) -> None:
        self._runtime = runtime
        self._seq = itertools.count(1)
        self._inflight: dict[int, tuple[Topic, Any, str, str]] = {}
        """Writes not yet acknowledged: seq -> (topic, message, participant, section)."""
        self._waiters: dict[int, tuple[str, str, asyncio.Future[None]]] = {}
        """seq -> (section, participant, the future its caller awaits)."""
        self._reports: dict[int, asyncio.Future[CompactReport]] = {}

    def next_seq(self) -> int:
        return next(self._seq)

    def send(self, topic: Topic, message: Any, participant_id: str, section: str) -> bool:
        """Send a write the section acknowledges (``message.seq``), kept until then; True if
        sent now, False if queued until the runtime starts (``ManagerRuntime.send``)."""
        self._inflight[message.seq] = (topic, message, participant_id, section)
        return self._runtime.send(topic, message, participant_id)

    def expect(self, seq: int, section: str, participant_id: str) -> asyncio.Future[None]:
        """A future resolved when write ``seq`` to ``section`` is acknowledged (or cleared)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[seq] = (section, participant_id, future)
        return future

    async def applied(
        self, seq: int, section: str, participant_id: str, sent: bool, what: str
    ) -> None:
        """Wait for write ``seq`` (sent now if ``sent``, else queued until the runtime starts)
        to be acknowledged; ``TimeoutError`` naming ``what`` after the control timeout,
        the write then staying in flight to be re-sent until acknowledged."""
        future = self.expect(seq, section, participant_id)
        timeout_s = self._runtime.plan.control_timeout_s
        try:
            await (asyncio.wait_for(asyncio.shield(future), timeout_s) if sent else future)
        except TimeoutError:
            raise TimeoutError(
                f"{what}: the section did not apply it within {timeout_s}s"
            ) from None
        finally:
            self.settle(seq, resend=True)

    def expect_report(self, seq: int) -> asyncio.Future[CompactReport]:
        """A future resolved with the report of manual compaction ``seq``."""
        future: asyncio.Future[CompactReport] = asyncio.get_running_loop().create_future()
        self._reports[seq] = future
        return future

    def report(self, report: CompactReport) -> None:
        future = self._reports.get(report.seq)
        if future is not None and not future.done():
            future.set_result(report)

    def settle(self, seq: int, *, resend: bool = False) -> None:
        """Its caller stopped waiting for write (or report) ``seq``: forget its waiter, and
        the write too unless ``resend`` (it is then re-sent until acknowledged)."""
        self._waiters.pop(seq, None)
        self._reports.pop(seq, None)
        if not resend:
            self._inflight.pop(seq, None)

    def acknowledged(self, participant_id: str, section: str, upto: int) -> None:
        """A view of ``section`` acknowledged this manager's writes up to ``upto``."""
        for seq in [
            seq
            for seq, (_, _, pid, name) in self._inflight.items()
            if seq <= upto and pid == participant_id and name == section
        ]:
            del self._inflight[seq]
        self.release(
            lambda name, pid, seq: pid == participant_id and name == section and seq <= upto
        )

    def release(self, match: Match) -> None:
        """Resolve the waiters ``match`` selects (their writes are applied or moot)."""
        for seq, (section, pid, future) in list(self._waiters.items()):
            if match(section, pid, seq):
                del self._waiters[seq]
                if not future.done():
                    future.set_result(None)

    def drop(self, participant_id: str) -> None:
        """Stop re-sending a cleared participant's writes."""
        for seq in [seq for seq, item in self._inflight.items() if item[2] == participant_id]:
            del self._inflight[seq]

    def busy(self) -> set[str]:
        """Participants with a write in flight or a caller waiting."""
        busy = {item[2] for item in self._inflight.values()}
        busy.update(item[1] for item in self._waiters.values())
        return busy

    @property
    def waiting(self) -> bool:
        """A caller waits for an acknowledgement."""
        return bool(self._waiters)

    def unacknowledged(self) -> list[tuple[Topic, Any, str]]:
        """Every write in flight, oldest first: ``(topic, message, participant)``."""
        return [(topic, message, pid) for topic, message, pid, _ in self._inflight.values()]

    def stopped(self) -> None:
        """The runtime stopped: no acknowledgement will come."""
        for _, _, future in self._waiters.values():
            if not future.done():
                future.set_exception(RuntimeClosedError("update: the context runtime stopped"))

    def close(self) -> None:
        """The manager closed: nothing is re-sent, and every waiter returns."""
        self._inflight.clear()
        self.release(lambda section, pid, seq: True)
