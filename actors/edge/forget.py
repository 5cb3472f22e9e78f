"""Forget a participant everywhere on a running edge box, and know when it is done.

Why: a participant who asks to be forgotten (``xrmq context clear``, ``/clear`` in ``xrmq
chat``) must be forgotten by everything that holds something of theirs: the router's turn
history and focus (it passes the history on with the next turn, and a destination would
record it again), each destination's own state (a tools transcript and its reclaimed
originals, a realtime session and its checkpoints), the context sections of every replica
and their journal rows. The router is the one actor that reaches every destination, in
order with the participant's turns (it cancels and drains them first), so the request is a
``ParticipantLeft`` through the router; the router forgets, asks each destination to forget
(each conversation destination also clears the participant's context), and answers with
``ParticipantForgotten`` naming the destinations that failed or did not answer in time
(``AgentRouter`` rule 8).

``ForgottenWaiter`` is the client's side: an actor on ``participant.forgotten`` whose
``forget(participant, timeout)`` publishes the ``ParticipantLeft`` and returns the router's
confirmation of that very request (matched by its message id); ``TimeoutError`` when no
router confirmed it in time. ``has_router(config)`` says whether a box of the config runs a
router at all: without one there is nobody to confirm, and a client clears the context
itself and says that nothing else was asked.
"""

from __future__ import annotations

import asyncio

from xrmq.actors.runtime import Agent, Handlers, RuntimeClosedError, RuntimeContext
from xrmq.schemas import ParticipantForgotten, ParticipantLeft
from xrmq.schemas._validation import check_name
from xrmq.topics import PARTICIPANT_FORGOTTEN_TOPIC, PARTICIPANT_LEFT_TOPIC

from .config import EdgeConfig


def has_router(config: EdgeConfig) -> bool:
    """Whether a box of ``config`` runs the built-in router (some process has its role)."""
    return any("router" in spec.roles for spec in config.processes.values())


def failures(forgotten: ParticipantForgotten) -> list[str]:
    """One line per destination that did not forget: ``"<route>: <Kind>: <message>"``."""
    return [f"{failure.route}: {failure.error}" for failure in forgotten.failed]


class ForgottenWaiter(Agent):
    """Register it with the client's runtime before the runtime starts (so its subscription
    is in place when the first request goes out); ``source`` is the envelope source of the
    ``ParticipantLeft`` it publishes."""

    def __init__(self, *, source: str = "text-input") -> None:
        check_name(source, "ForgottenWaiter.source")
        self.source = source
        self._waiting: dict[str, asyncio.Future[ParticipantForgotten]] = {}

    def handlers(self) -> Handlers:
        return {PARTICIPANT_FORGOTTEN_TOPIC: self._on_forgotten}

    async def forget(self, participant_id: str, timeout: float) -> ParticipantForgotten:
        """Ask the box to forget ``participant_id``; the router's confirmation, or
        ``TimeoutError`` naming the wait when none came within ``timeout`` seconds."""
        check_name(participant_id, "participant")
        if not timeout > 0:
            raise ValueError(f"timeout: must be > 0, not {timeout!r}")
        runtime = self.runtime
        if runtime is None or not runtime.running:
            raise RuntimeClosedError("ForgottenWaiter.forget: register it with a running runtime")
        request = runtime.send(
            PARTICIPANT_LEFT_TOPIC,
            ParticipantLeft(),
            participant_id=participant_id,
            source=self.source,
        )
        answer = self._waiting[request] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"no router confirmed forgetting {participant_id} within {timeout:g}s"
            ) from None
        finally:
            self._waiting.pop(request, None)

    async def _on_forgotten(self, message: ParticipantForgotten, ctx: RuntimeContext) -> None:
        answer = self._waiting.get(message.request_id or "")
        if answer is not None and not answer.done():
            answer.set_result(message)
