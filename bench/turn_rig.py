"""The turn path deployed over OS processes, driven from a suite (turn and storm).

``Deployment(config)`` starts an ``xrmq bus`` broker and one process per role of
``bench.turn_workers`` (context sections, compaction workers, conversation with its
context replica, router, the measuring client, and optionally the sensor), plus the
raw pyzmq baselines through the same broker, so the runtime's turn latency and raw
pyzmq are measured side by side: the ping-pong pair of ``bench.bus_workers`` (back to
back) and the three processes of ``bench.turn_ring`` (the turn's 3-hop ring and a 2-hop
round trip, paced like the turns); and the tap of ``bench.turn_tap``, which counts each
turn's broker crossings up to its first chunk in a counting pass (``start_counting``,
``crossings``) and is unsubscribed otherwise. Every process lives for the whole
deployment except the conversation, which ``restart_conversation`` replaces to change
its model.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .procs import Worker, broker

TOPIC = "bench.notes"
ROLES = ("sections", "workers", "conversation", "router", "client")


@dataclass(frozen=True)
class Config:
    """What every process of one deployment agrees on: the ``context_plan`` keyword
    arguments, the (time to first token s, tokens per second) of each model and the
    sections' journal."""

    plan: dict[str, Any] = field(default_factory=lambda: {"incremental_context_topics": [TOPIC]})
    answer_model: tuple[float, float] = (0.0, 0.0)
    compaction_model: tuple[float, float] = (0.0, 0.0)
    journal: str | None = None
    """The sections process's journal (a SQLite file), or None: memory only."""
    answer_litellm: bool = False
    """Answer through ``LiteLLMService`` on litellm's ``mock_response`` (the real import and
    code path, no network) instead of ``OfflineLLM``."""
    answer_prepare: bool = True
    """Prepare the answer model (``LLMService.prepare``) before the process reports ready."""
    telemetry: str | None = None
    """An OTLP/HTTP traces URL: the router exports turns there on its ``telemetry otlp``
    command (``turn_workers.telemetry_commands``)."""


class Deployment:
    """The processes of one deployment; use as a context manager."""

    def __init__(self, config: Config, *, sensor: bool = False) -> None:
        self.config = config
        self._sensor = sensor
        self._stack = ExitStack()
        self.workers: dict[str, Worker] = {}

    def __enter__(self) -> Deployment:
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> None:
        """Start every process without waiting for them (several deployments start at once)."""
        try:
            self.bus, self.workers["broker"] = self._stack.enter_context(broker())
            roles = (*ROLES, "sensor") if self._sensor else ROLES
            for role in roles:
                self._start(role, self.config)
            self._start_raw()
            self._start_ring()
            self._start_tap()
        except BaseException:
            self._stack.close()
            raise

    def wait_ready(self) -> None:
        """Wait until every process of ``launch`` is ready."""
        try:
            for worker in self.workers.values():
                if worker.name != "broker":
                    worker.expect("ready")
        except BaseException:
            self._stack.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self, role: str, config: Config) -> Worker:
        worker = Worker(
            role, "-m", "bench.turn_workers", role, self.bus, json.dumps(asdict(config))
        )
        self._stack.callback(worker.close)
        self.workers[role] = worker
        return worker

    def _start_raw(self) -> None:
        for role, name in (("raw-receiver", "raw-echo"), ("raw-sender", "raw-ping")):
            worker = Worker(name, "-m", "bench.bus_workers", role, self.bus, "1")
            self._stack.callback(worker.close)
            self.workers[name] = worker

    def _start_ring(self) -> None:
        # "raw-" names: not the turn path's processes (the storm suite's CPU rows skip them)
        for name, argv in (
            ("raw-ring-router", ("hop", self.bus, "router")),
            ("raw-ring-conversation", ("hop", self.bus, "conversation")),
            ("raw-ring-client", ("client", self.bus)),
        ):
            worker = Worker(name, "-m", "bench.turn_ring", *argv)
            self._stack.callback(worker.close)
            self.workers[name] = worker

    def _start_tap(self) -> None:
        worker = Worker("tap", "-m", "bench.turn_tap", self.bus)
        self._stack.callback(worker.close)
        self.workers["tap"] = worker

    def start_counting(self) -> None:
        """Subscribe the tap to the turn path (returns once the broker applied it): the
        turns from now until ``crossings`` are counted, and share the cores with the tap."""
        self.workers["tap"].command("start")
        self.workers["tap"].expect("counting")

    def crossings(self) -> dict[str, Any]:
        """End the counting pass: broker crossings from query to first chunk of each turn
        since ``start_counting``: ``{"crossings": [per turn], "by_topic": {topic:
        crossings}, "outside": n}`` (``bench.turn_tap``)."""
        self.workers["tap"].command("counts")
        return self.workers["tap"].result()

    def restart_conversation(
        self, answer_model: tuple[float, float], *, litellm: bool = False, prepare: bool = True
    ) -> None:
        """Replace the conversation process by one answering on ``answer_model`` (or, with
        ``litellm``, on litellm's mock model, prepared before ready unless not ``prepare``);
        returns once the new process is ready."""
        self.workers["conversation"].close()
        config = replace(
            self.config, answer_model=answer_model, answer_litellm=litellm, answer_prepare=prepare
        )
        # the import: seconds
        self._start("conversation", config).expect("ready", timeout=120 if litellm else 30)

    def raw_rtt(self, count: int) -> list[float]:
        """``count`` sequential raw pyzmq ping-pongs through the broker, in us."""
        self.workers["raw-ping"].command(f"ask {count}")
        return self.workers["raw-ping"].result()["rtt_us"]

    def ring(self, count: int, participants: list[str], pause_ms: float) -> dict[str, Any]:
        """The raw 3-hop ring (query, turn, chunk), paced as ``turns``: ``{"rtt_us",
        "failed"}`` (``bench.turn_ring``)."""
        return self._paced("ring", count, participants, pause_ms)

    def paced_rtt(self, count: int, participants: list[str], pause_ms: float) -> dict[str, Any]:
        """The raw 2-hop round trip, paced as ``turns``: ``{"rtt_us", "failed"}``."""
        return self._paced("ping", count, participants, pause_ms)

    def _paced(
        self, loop: str, count: int, participants: list[str], pause_ms: float
    ) -> dict[str, Any]:
        client = self.workers["raw-ring-client"]
        client.command(f"{loop} {count} {','.join(participants)} {pause_ms}")
        return client.result(timeout=60 + count * 5)

    def turns(self, count: int, participants: list[str], pause_ms: float) -> dict[str, Any]:
        """``count`` sequential turns per participant, participants concurrently, a
        pause of ``pause_ms`` on average before each: ``{"first_us", "bus_us", "failed"}``
        (see ``turn_workers``)."""
        client = self.workers["client"]
        client.command(f"turns {count} {','.join(participants)} {pause_ms}")
        return client.result(timeout=60 + count * 5)

    def telemetry(self, mode: str) -> None:
        """Switch the router's turn records ``off``, to ``records`` or to ``otlp`` export."""
        self.workers["router"].command(f"telemetry {mode}")
        self.workers["router"].result()

    def flush_traces(self) -> bool:
        """Have the router's exporter send what it holds; True once it went out."""
        self.workers["router"].command("flush")
        return bool(self.workers["router"].result()["flushed"])

    def compactions(self) -> dict[str, int]:
        """``{"compactions", "failed", "busy"}`` of the compaction workers' process."""
        self.workers["workers"].command("stats")
        return self.workers["workers"].result()

    def storm(self, rate: float, participants: int) -> None:
        self.workers["sensor"].command(f"storm {rate} {participants}")

    def calm(self) -> dict[str, float]:
        """Stop the storm: ``{"published", "seconds"}``."""
        self.workers["sensor"].command("stop")
        return self.workers["sensor"].result()

    def quiesce(self, settle_s: float = 0.3, timeout_s: float = 30.0) -> bool:
        """Wait until no compaction job has been queued or running for ``settle_s``."""
        deadline = time.monotonic() + timeout_s
        quiet_since = None
        while time.monotonic() < deadline:
            if self.compactions()["busy"]:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settle_s:
                return True
            time.sleep(0.05)
        return False

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each process."""
        return {name: worker.cpu_seconds() for name, worker in self.workers.items()}

    def cpu_ns(self, names: tuple[str, ...] = ("broker", *ROLES)) -> dict[str, int]:
        """CPU ns run so far by the threads of each process of ``names`` (``Worker.cpu_ns``:
        schedstat, finer than ``cpu_seconds``)."""
        return {name: self.workers[name].cpu_ns() for name in names if name in self.workers}
