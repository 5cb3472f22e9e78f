"""``Publisher``: publish onto the bus from a plain script, without asyncio.

Why: a sensor process is often a loop that reads a device and publishes what it saw;
it should not have to be written as a coroutine to do so. ``Publisher`` runs an
``AgentRuntime`` on an event loop in a background thread and hands each ``publish``
to it, returning once the message is on its way (the runtime's own readiness
handshake ran before the first one, so nothing is dropped while connecting)::

    with Publisher("default", name="lab-sensor") as pub:
        pub.publish("notes", "The kettle is set to 85 degrees.", participant="p1", source="kettle")

Its runtime heartbeats the last seq of what it published every ``heartbeat_s`` (2 s) and
once more on ``close()``, so a subscriber counts what the bus dropped, even the last messages.

``topic`` is a ``Topic`` or a name (a standard topic, else a context topic); content
is the message itself, a JSON object of its fields, or text (a context update, or a
query on ``voice.query``), as ``xrmq publish`` takes it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from types import TracebackType
from typing import Any

from xrmq.actors.runtime import DEFAULT_BUS, AgentRuntime
from xrmq.actors.runtime.content import parse_content, topic_for
from xrmq.topics import Topic

APPLICATION = "application"


class Publisher:
    """A synchronous publisher on ``bus`` (default ``$XRMQ_BUS``, else ``default``).

    ``name`` names its runtime (the envelope's ``sender``); ``ready_timeout`` bounds the
    wait for the broker on entry (``TimeoutError``). Use it as a context manager, or call
    ``start()`` and ``close()``.
    """

    def __init__(
        self, bus: str | None = None, *, name: str | None = None, ready_timeout: float = 10.0
    ) -> None:
        self.bus = bus or os.environ.get("XRMQ_BUS", DEFAULT_BUS)
        self._runtime = AgentRuntime(self.bus, name=name, ready_timeout=ready_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Publisher:
        """Connect and wait until the broker answers; raises what the runtime's start raises."""
        if self._loop is not None:
            raise RuntimeError("Publisher.start: already started")
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="xrmq-publisher", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._runtime.start(), loop).result()
        except BaseException:
            self._stop_loop()
            raise
        return self

    def publish(
        self,
        topic: Topic | str,
        content: Any,
        *,
        participant: str | None = None,
        source: str = APPLICATION,
    ) -> str:
        """Publish one message; returns its message id. ``ValueError`` for content the topic's
        schema rejects, ``RuntimeError`` when not started."""
        if self._loop is None:
            raise RuntimeError(
                "Publisher.publish: start the publisher first (use it in a 'with' block)"
            )
        resolved = topic if isinstance(topic, Topic) else topic_for(topic)
        message = parse_content(resolved, content) if isinstance(content, str) else content

        async def send() -> str:
            return self._runtime.send(resolved, message, participant_id=participant, source=source)

        return asyncio.run_coroutine_threadsafe(send(), self._loop).result()

    def close(self) -> None:
        """Let the messages published so far leave, then stop; idempotent."""
        if self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._runtime.stop(), self._loop).result()
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join()
        loop.close()

    def __enter__(self) -> Publisher:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
