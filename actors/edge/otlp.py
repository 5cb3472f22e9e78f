"""The OTLP/HTTP trace exporter of a box: every turn's record sent as a trace.

``TraceExporter`` observes the router's records in the router's process (one of its
``record_observers``: no bus hop, no decoding, which would cost more than the spans).
Observing only appends the record to a bounded queue (``OTEL_BSP_MAX_QUEUE_SIZE`` turns,
512 by default; beyond, a record is dropped and counted, with a rate-limited warning):
nothing else happens on the turn's path. A thread of the exporter wakes every
``OTEL_BSP_SCHEDULE_DELAY`` milliseconds (5000 by default), or once a batch is waiting,
plans each queued record's spans (``telemetry.turn_spans``), gives them their ids (the
turn's trace, a random span id each), encodes them as one OTLP protobuf request
(``otlp_wire.py``, by hand: no OpenTelemetry SDK, whose per-span objects and encoding cost
the router several times as much) and POSTs it to the collector over a kept-alive
HTTP/1.1 connection, with the standard variables' headers (``telemetry.otlp_headers``).
A collector that refuses or does not answer loses that batch,
counted (``failed_spans``) and logged. Stopping sends what is queued (within
``STOP_FLUSH_MS``).

This module is imported only by a box whose config, or environment, names a collector
(``telemetry.traces_endpoint``).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import random
import threading
import time
from collections import deque
from urllib.parse import urlsplit

from xrmq.actors.runtime import Agent, get_logger
from xrmq.schemas import TurnRecord

from .otlp_wire import encode_request, encode_span
from .telemetry import otlp_headers, parent_of, trace_id_of_turn, turn_spans

STOP_FLUSH_MS = 2_000
"""How long stopping waits for the queued spans to go out (the process's shutdown is
bounded: a collector that does not answer loses them, with a warning)."""
BATCH_TURNS = 128
"""Turns per request at most; a batch this size waiting wakes the sending thread early."""
WARN_EVERY_S = 10.0
"""At most one warning per this many seconds for drops and failed requests."""


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() and int(value) > 0 else default


class TraceExporter(Agent):
    """Sends each turn's record it observes (``observe``, one of the router's
    ``record_observers``) to ``endpoint`` (an OTLP/HTTP traces URL, ``http`` or ``https``)
    as one trace; see the module docstring. Registered as an actor for its lifecycle only
    (it subscribes to nothing): before the router, so it stops after the router's last
    turn and flushes then."""

    def __init__(
        self,
        endpoint: str,
        *,
        schedule_delay_ms: int | None = None,
        max_queue: int | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"TraceExporter.endpoint: an http(s) URL, not {endpoint!r}")
        self.endpoint = endpoint
        self._url = url
        self._path = url.path or "/"
        self.schedule_delay_s = (
            schedule_delay_ms or _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000)
        ) / 1000
        self.max_queue = max_queue or _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 512)
        self.timeout_s = timeout_s
        self.headers = otlp_headers()
        self._queue: deque[TurnRecord] = deque()
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._connection: http.client.HTTPConnection | None = None
        self._random = random.Random()
        self._warned_at = -WARN_EVERY_S
        self.dropped = 0
        """Records dropped because the queue was full."""
        self.sent_spans = 0
        self.failed_spans = 0
        """Spans of batches the collector refused or did not take."""

    def observe(self, record: TurnRecord) -> None:
        """Queue one turn (the exporter's thread sends it)."""
        if len(self._queue) >= self.max_queue:
            self.dropped += 1
            self._warn("telemetry.queue_full", dropped=self.dropped)
            return
        self._queue.append(record)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="otlp-exporter", daemon=True)
            self._thread.start()
        if len(self._queue) >= BATCH_TURNS:
            self._wake.set()

    def flush(self, timeout_ms: int = 30_000) -> bool:
        """Send what is queued now (blocking); False if it did not all go out in time."""
        deadline = time.monotonic() + timeout_ms / 1000
        ok = True
        while self._queue and ok:
            ok = self._send_batch(max(0.001, deadline - time.monotonic()))
        return ok and not self._queue

    async def on_stop(self) -> None:
        self._closed.set()
        self._wake.set()
        if not await asyncio.to_thread(self.flush, STOP_FLUSH_MS):
            get_logger(endpoint=self.endpoint).warning("telemetry.flush_timeout")
        if self._connection is not None:
            self._connection.close()

    def encode(self, records: list[TurnRecord]) -> tuple[bytes, int]:
        """One OTLP request holding the traces of ``records``, and its number of spans."""
        spans: list[tuple[str, bytes]] = []
        for record in records:
            plans = turn_spans(record)
            remote = parent_of(record.traceparent)
            trace_id = (remote[0] if remote else trace_id_of_turn(record.turn_id)).to_bytes(16)
            ids = [(self._random.getrandbits(64) or 1).to_bytes(8) for _ in plans]
            root_parent = remote[1].to_bytes(8) if remote else None
            for plan, span_id in zip(plans, ids):
                parent = root_parent if plan.parent is None else ids[plan.parent]
                spans.append((plan.runtime, encode_span(plan, trace_id, span_id, parent)))
        return encode_request(spans), len(spans)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.schedule_delay_s)
            self._wake.clear()
            while self._queue and not self._closed.is_set():
                self._send_batch(self.timeout_s)

    def _send_batch(self, timeout_s: float) -> bool:
        """Send up to ``BATCH_TURNS`` queued turns as one request; False if it failed."""
        with self._send_lock:
            records: list[TurnRecord] = []
            while self._queue and len(records) < BATCH_TURNS:
                records.append(self._queue.popleft())
            if not records:
                return True
            body, spans = self.encode(records)
            try:
                self._post(body, timeout_s)
            except (OSError, http.client.HTTPException, RuntimeError) as error:
                if self._connection is not None:
                    self._connection.close()
                self._connection = None
                self.failed_spans += spans
                self._warn("telemetry.export_failed", error=repr(error), lost=self.failed_spans)
                return False
            self.sent_spans += spans
            return True

    def _post(self, body: bytes, timeout_s: float) -> None:
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection
                if self._url.scheme == "https"
                else http.client.HTTPConnection
            )
            self._connection = kind(self._url.hostname or "", self._url.port, timeout=timeout_s)
        self._connection.timeout = timeout_s
        if self._connection.sock is not None:
            self._connection.sock.settimeout(timeout_s)
        self._connection.request(
            "POST",
            self._path,
            body,
            {
                **self.headers,
                "Content-Type": "application/x-protobuf",
                "Content-Length": str(len(body)),
            },
        )
        response = self._connection.getresponse()
        response.read()
        if not 200 <= response.status < 300:
            raise RuntimeError(f"the collector answered {response.status} {response.reason}")

    def _warn(self, event: str, **fields: object) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            get_logger(endpoint=self.endpoint).warning(event, **fields)
