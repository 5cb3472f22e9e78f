"""``xrmq up``: start the broker and every configured process, supervise them, stop them in order.

Each process of the config (each replica) and the broker run as separate OS processes,
each in a session (process group) of its own, so a terminal's Ctrl-C reaches only the
supervisor and the supervisor decides the order. Startup follows the ``after``
dependencies: the broker, then each layer of processes once the previous layer has
printed its readiness line. Every line a child prints is forwarded, prefixed with its
name. A child that dies is restarted per its ``RestartPolicy``. A child that exits
cleanly (exit code 0: someone stopped it) is restarted after the policy's initial delay
but is not counted as a crash. The ready line names the bus as the string ``--bus``
takes.

Liveness: once the broker is up the supervisor joins the bus itself. It reads every
process's heartbeat (``RuntimeMetrics``) and publishes a ``SupervisorReport`` (the
state of every process, for ``xrmq top``) whose return through the broker is the
broker's own heartbeat. A ready process silent for ``supervisor.liveness_timeout_s``
is killed (SIGKILL) and restarted like a crash (``liveness.LivenessWatch``). Its runtime
(``xrmq-up.<pid>``) heartbeats too, every ``supervisor.metrics_interval_s``, so ``xrmq top``
shows it like any other: a frame it rejects (a malformed report or heartbeat) is counted
there, not only in its log.

Fatal exits: a child that exits with ``FATAL_EXIT`` (2: ``xrmq run``'s exit for a
configuration error found only once it starts, e.g. a corrupt journal, a missing key,
a bus already served) is not restarted, since a restart would fail the same way: it is
reported once with its last line (the cause) and then given up on at once.

Giving up: a process over its crash limit (or failed fatally) is handled per its
``on_give_up``:
``stay_down`` leaves it down, says so loudly (a line here, state ``down`` in the
report) and keeps the rest running, and ``xrmq up`` exits 1 when it is stopped;
``stop_box`` (always for the broker) stops everything and exits 1 at once.

Box info: on the bus it also answers clients asking about the box (``BoxInfoRequest`` on
``xrmq.box``: the config it runs, its destinations; ``boxinfo``), so a client command
needs no ``--config`` to know them.

On SIGINT/SIGTERM it stops the processes in reverse dependency order (SIGTERM, then
SIGKILL after ``supervisor.shutdown_timeout_s``), the broker last, and removes the
bus's ipc socket files; no process of a child's group outlives it. A process drains
on SIGTERM (the router lets answers in flight finish), so the next layer is stopped
as soon as it has exited. On Linux each child also gets SIGTERM if the supervisor
itself dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext, get_logger
from xrmq.actors.runtime.address import parse_bus
from xrmq.schemas import BoxInfo, BoxInfoRequest, ProcessState, RuntimeMetrics, SupervisorReport
from xrmq.schemas.metrics import ProcessStateName
from xrmq.topics import BOX_TOPIC, METRICS_TOPIC, SUPERVISOR_TOPIC

from .boxinfo import box_info
from .config import EdgeConfig, RestartPolicyConfig
from .liveness import BUS, LivenessWatch
from .process import FATAL_EXIT, READY_PREFIX
from .restart import RestartDecision, RestartPolicy
from .roles import check_roles

BUS_READY_PREFIX = "xrmq bus: ready"
_PR_SET_PDEATHSIG = 1
_LINE_LIMIT = 1 << 20
"""Longest output line forwarded whole; longer lines are forwarded in pieces."""


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGTERM when ``parent`` exits (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Child:
    """One supervised OS process: its command, readiness handshake and restart policy."""

    def __init__(
        self,
        label: str,
        argv: list[str],
        ready_prefix: str,
        policy: RestartPolicyConfig,
        on_give_up: str = "stop_box",
    ) -> None:
        self.label = label
        self.argv = argv
        self.ready_prefix = ready_prefix
        self.policy = RestartPolicy(policy)
        self.on_give_up = on_give_up
        self.state: ProcessStateName = "starting"
        self.restarts = 0
        self.reason = ""
        """Why it is down (state ``down``)."""
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = asyncio.Event()
        """Set once the first incarnation is ready (startup waits on it)."""
        self.finished = asyncio.Event()
        """Set when supervision of this child has ended (stopped, or given up)."""
        self.last_line = ""
        self.task: asyncio.Task[None] | None = None
        self.terminating = False
        """Set by the supervisor when it stops this child: no restart from then on."""
        self.forwarders: list[asyncio.Task[None]] = []
        """The tasks copying the current incarnation's output lines."""


class Supervisor:
    """Runs one ``EdgeConfig`` as supervised OS processes (see the module docstring).

    ``config_path`` is passed to the children (``xrmq run NAME --config PATH``); None
    makes them use the built-in default too. ``out`` receives the supervisor's own
    lines (``xrmq up: ...``) and every forwarded child line (``name | ...``).
    """

    def __init__(
        self,
        config: EdgeConfig,
        config_path: str | None,
        *,
        out: TextIO = sys.stdout,
        python: str = sys.executable,
    ) -> None:
        check_roles(config)
        self.config = config
        self.config_path = config_path
        self.out = out
        self.python = python
        self.address = parse_bus(config.bus.address)
        self._stop = asyncio.Event()
        self._gave_up: str | None = None
        self._broker_started = False
        self._children: dict[str, Child] = {}
        self._liveness = LivenessWatch(config.supervisor.liveness_timeout_s)
        self._bus_runtime: AgentRuntime | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._log = get_logger(component="supervisor")

    def stop(self) -> None:
        """Ask ``run()`` to shut everything down in order, as SIGINT/SIGTERM do."""
        self._stop.set()

    def say(self, text: str) -> None:
        self.out.write(f"xrmq up: {text}\n")
        self.out.flush()

    # ------------------------------------------------------------------ the command

    async def run(self) -> int:
        """Start everything, supervise until a signal (0) or a crash loop (1), then stop
        everything."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._stop.set)
        broker = self._broker_child()
        layers = [
            [
                self._process_child(name, shard)
                for name in layer
                for shard in range(self.config.processes[name].replicas)
            ]
            for layer in self.config.startup_layers()
        ]
        everyone = (broker, *(child for layer in layers for child in layer))
        self._children = {child.label: child for child in everyone}
        started: list[list[Child]] = []
        try:
            if await self._start_layer([broker]):
                self._broker_started = True
                await self._join_bus()
                for layer in layers:
                    started.append(layer)
                    if not await self._start_layer(layer):
                        break
                else:
                    pids = " ".join(
                        f"{child.label}={_pid_or_down(child)}"
                        for layer in layers
                        for child in layer
                    )
                    self.say(f"ready bus={self.config.bus.address} {pids}".rstrip())
                    await self._stop.wait()
        finally:
            self._stop.set()
            await self._leave_bus_watch()
            for layer in reversed(started):
                await asyncio.gather(*(self._terminate(child) for child in layer))
            if self._bus_runtime is not None:
                await self._bus_runtime.stop()
            await self._terminate(broker)
            self._remove_socket_files()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        if self._gave_up is not None:
            self.say(f"stopped: {self._gave_up}")
            return 1
        down = [child for child in self._children.values() if child.state == "down"]
        if down:
            self.say(f"stopped; left down: {'; '.join(child.reason for child in down)}")
            return 1
        self.say("stopped")
        return 0

    # ------------------------------------------------------------------ liveness

    async def _join_bus(self) -> None:
        """Join the bus to read heartbeats and publish reports; without it, no liveness watch."""
        from .identities import supervisor_keys

        try:
            keys: dict[str, Any] = dict(supervisor_keys(self.config))
            runtime = AgentRuntime(
                self.config.bus.address,
                name=f"xrmq-up.{os.getpid()}",
                ready_timeout=self.config.supervisor.ready_timeout_s,
                metrics_interval=self.config.supervisor.metrics_interval_s,
                **keys,
            )
        except ValueError as error:  # a key missing or unreadable: the box runs unwatched
            self.say(f"cannot join the bus to watch heartbeats ({error}); liveness is not watched")
            return
        runtime.register("supervisor", _Heartbeats(self))
        try:
            await runtime.start()
        except Exception as error:  # the box runs without the watch, as it did before it
            self.say(
                f"cannot join the bus to watch heartbeats ({error!r}); liveness is not watched"
            )
            return
        self._bus_runtime = runtime
        self._watch_task = asyncio.create_task(self._watch(), name="xrmq-supervisor-liveness")

    async def _leave_bus_watch(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
            self._watch_task = None

    async def _watch(self) -> None:
        """Every tick: publish the report (the broker's probe), kill what stopped heartbeating."""
        supervisor = self.config.supervisor
        tick = min(supervisor.metrics_interval_s, supervisor.liveness_timeout_s / 4)
        loop = asyncio.get_running_loop()
        runtime = self._bus_runtime
        assert runtime is not None
        stalled = False
        while not self._stop.is_set():
            try:
                if runtime.running:
                    runtime.send(SUPERVISOR_TOPIC, self.report(), source="supervisor")
                if not stalled:
                    self._kill_hung(loop.time())
            except Exception as error:  # a bug here must not end the watch
                self._log.error("supervisor.watch_failed", error=repr(error))
            woke_by = loop.time() + tick
            await asyncio.sleep(tick)
            # Woken much later than asked, this process was stalled: heartbeats that arrived
            # meanwhile are not read yet, so nobody is judged until the next tick.
            stalled = loop.time() - woke_by > tick

    def _kill_hung(self, now: float) -> None:
        timeout = self.config.supervisor.liveness_timeout_s
        for label, silent in self._liveness.hung(now):
            child = self._children[label]
            if child.proc is None or child.proc.returncode is not None or child.terminating:
                continue
            what = (
                "its supervisor report did not come back through it"
                if label == BUS
                else "no heartbeat"
            )
            self.say(
                f"{label}: {what} for {silent:.1f}s (liveness_timeout_s = {timeout:g}); killing it"
            )
            self._liveness.stopped(label)
            self._signal_group(child.proc.pid, signal.SIGKILL)

    def report(self) -> SupervisorReport:
        """Every supervised process's state now (``xrmq top`` shows the ones down from it)."""
        processes = tuple(
            ProcessState(
                child.label,
                child.state,
                pid=child.proc.pid
                if child.proc is not None and child.state in ("starting", "running")
                else 0,
                restarts=child.restarts,
                reason=child.reason,
            )
            for child in self._children.values()
        )
        return SupervisorReport("xrmq up", os.getpid(), time.time_ns() // 1000, processes)

    def heartbeat(self, metrics: RuntimeMetrics) -> None:
        self._liveness.heard(metrics.runtime, metrics.pid, asyncio.get_running_loop().time())

    def report_returned(self, report: SupervisorReport, sender: str) -> None:
        if self._bus_runtime is not None and sender == self._bus_runtime.name:
            self._liveness.bus_heard(asyncio.get_running_loop().time())

    def _broker_child(self) -> Child:
        bus = self.config.bus
        argv = [
            self.python,
            "-m",
            "xrmq.actors.cli",
            "bus",
            "--bus",
            bus.address,
            "--max-message-bytes",
            str(bus.max_message_bytes),
            "--subscriber-budget-bytes",
            str(bus.subscriber_budget_bytes),
            "--metrics-interval",
            str(self.config.supervisor.metrics_interval_s),
        ]
        if not self.config.bus.capture:
            argv.append("--no-capture")
        if self.config_path is not None:  # the broker reads [bus.security] from it
            argv += ["--config", self.config_path]
        return Child(
            BUS, argv, BUS_READY_PREFIX, self.config.supervisor.restart, on_give_up="stop_box"
        )

    def _process_child(self, name: str, shard: int) -> Child:
        instance = self.config.instances(name)[shard]
        argv = [self.python, "-m", "xrmq.actors.cli", "run", name, "--shard", str(shard)]
        if self.config_path is not None:
            argv += ["--config", self.config_path]
        return Child(
            instance.runtime_name,
            argv,
            READY_PREFIX,
            self.config.restart_policy(name),
            on_give_up=self.config.processes[name].on_give_up,
        )

    async def _start_layer(self, layer: list[Child]) -> bool:
        """Start every child of ``layer`` and wait until each is ready; False if stopping
        meanwhile."""
        for child in layer:
            child.task = asyncio.create_task(
                self._supervise(child), name=f"xrmq-supervise-{child.label}"
            )
        stop = asyncio.create_task(self._stop.wait())
        ready = [asyncio.create_task(child.ready.wait()) for child in layer]
        try:
            all_ready: asyncio.Future[Any] = asyncio.gather(*ready)
            await asyncio.wait([stop, all_ready], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            for waiter in ready:
                waiter.cancel()
        return not self._stop.is_set()

    # ------------------------------------------------------------------ one child

    async def _supervise(self, child: Child) -> None:
        """Run ``child``, restarting it per its policy, until stopping or giving up."""
        loop = asyncio.get_running_loop()
        timeout = self.config.supervisor.ready_timeout_s
        try:
            while not (child.terminating or self._stop.is_set()):
                child.state = "starting"
                incarnation_ready = asyncio.Event()
                try:
                    proc = await self._spawn(child, incarnation_ready)
                except OSError as error:
                    self._gave_up = f"cannot start {child.label}: {error}"
                    self.say(self._gave_up)
                    self._stop.set()
                    return
                if child.terminating:  # _terminate ran while this process was being created
                    await self._stop_process(child, proc)
                    await asyncio.gather(*child.forwarders)
                    return
                exited = asyncio.create_task(proc.wait())
                became_ready = asyncio.create_task(incarnation_ready.wait())
                done, _ = await asyncio.wait(
                    [exited, became_ready], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                became_ready.cancel()
                if became_ready in done:
                    restarted = child.ready.is_set()
                    child.ready.set()
                    child.state = "running"
                    child.restarts += restarted
                    self._liveness.started(child.label, proc.pid, loop.time())
                    self.say(
                        f"{'restarted' if restarted else 'started'} {child.label} pid={proc.pid}"
                    )
                elif not done:
                    self.say(f"{child.label} not ready within {timeout:g}s; killing it")
                    self._signal_group(proc.pid, signal.SIGKILL)
                returncode = await exited
                self._liveness.stopped(child.label)
                self._signal_group(proc.pid, signal.SIGKILL)  # nothing of its group outlives it
                await asyncio.gather(*child.forwarders)  # every line it printed is out
                if child.terminating or self._stop.is_set():
                    return
                if returncode == 0:  # a clean stop (SIGTERM from outside): not a crash
                    delay = child.policy.config.backoff_initial_s
                    child.state = "restarting"
                    self.say(
                        f"{child.label} exited cleanly (exit code 0), not a crash; "
                        f"restarting in {delay:g}s"
                    )
                    try:
                        await asyncio.wait_for(self._stop.wait(), delay)
                    except TimeoutError:
                        pass
                    continue
                last = f": {child.last_line}" if child.last_line else ""
                decision: RestartDecision | None
                if returncode == FATAL_EXIT:  # a configuration error: a restart cannot help
                    reason = (
                        f"{child.label} failed fatally (exit code {FATAL_EXIT}, a"
                        f" configuration error: not restarted){last}"
                    )
                    decision = None
                else:
                    decision = child.policy.crashed(loop.time())
                    reason = (
                        f"gave up on {child.label}: {decision.reason};"
                        f" last {describe_exit(returncode)}{last}"
                    )
                if decision is None or not decision.restart:
                    if child.on_give_up == "stop_box":
                        self._gave_up = reason
                        self.say(self._gave_up)
                        self._stop.set()
                        return
                    child.state, child.reason = "down", reason
                    child.ready.set()  # startup goes on without it
                    self.say(
                        f'{reason}; left DOWN (on_give_up = "stay_down"),'
                        " the other processes keep running"
                    )
                    self._log.error("supervisor.process_down", process=child.label, reason=reason)
                    return
                child.state = "restarting"
                self.say(f"{child.label} exited ({describe_exit(returncode)}); {decision.reason}")
                try:
                    await asyncio.wait_for(self._stop.wait(), decision.delay_s)
                except TimeoutError:
                    pass
        finally:
            child.finished.set()

    def _child_env(self) -> dict[str, str] | None:
        """On a terminal, the children log human lines too (their own output is a pipe)."""
        isatty = getattr(self.out, "isatty", None)
        if "XRMQ_LOG_FORMAT" in os.environ or not (callable(isatty) and isatty()):
            return None
        return {**os.environ, "XRMQ_LOG_FORMAT": "console"}

    async def _spawn(self, child: Child, ready: asyncio.Event) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            *child.argv,
            env=self._child_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
            limit=_LINE_LIMIT,
        )
        child.proc = proc
        assert proc.stdout is not None and proc.stderr is not None  # both piped
        child.forwarders = [
            asyncio.create_task(self._forward(child, proc.stdout, ready)),
            asyncio.create_task(self._forward(child, proc.stderr, None)),
        ]
        return proc

    async def _forward(
        self, child: Child, stream: asyncio.StreamReader, ready: asyncio.Event | None
    ) -> None:
        """Copy a child's output lines, prefixed with its name; spot its readiness line."""
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line longer than the limit: forward it in pieces
                line = await stream.read(_LINE_LIMIT)
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            self.out.write(f"{child.label} | {text}\n")
            self.out.flush()
            if text.strip():
                child.last_line = text.strip()[:300]
            if ready is not None and text.startswith(child.ready_prefix):
                ready.set()

    async def _terminate(self, child: Child) -> None:
        """SIGTERM the child's group, SIGKILL it after the shutdown timeout; wait for supervision to
        end."""
        if child.task is None:
            return
        child.terminating = True
        if child.proc is not None:
            await self._stop_process(child, child.proc)
        await child.finished.wait()

    async def _stop_process(self, child: Child, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is not None:
            return
        self._signal_group(proc.pid, signal.SIGTERM)
        timeout = self.config.supervisor.shutdown_timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), timeout)
        except TimeoutError:
            self.say(f"{child.label} did not stop within {timeout:g}s; killing it")
            self._signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
        self._signal_group(proc.pid, signal.SIGKILL)  # whatever else of its group is left

    @staticmethod
    def _signal_group(pgid: int, signum: int) -> None:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _remove_socket_files(self) -> None:
        """Remove the ipc socket files a killed broker left (only for a bus this supervisor
        served)."""
        if not self._broker_started:
            return
        paths = self.address.ipc_paths
        if paths:
            for path in (*paths, Path(str(paths[0]).removesuffix(".in") + ".lock")):
                path.unlink(missing_ok=True)


class _Heartbeats(Agent):
    """The supervisor's actor on the bus: every heartbeat, its own reports coming back, and
    clients asking about the box (``BoxInfo``, ``boxinfo``)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.info = box_info(supervisor.config)

    def handlers(self) -> Handlers:
        return {
            METRICS_TOPIC: self.on_metrics,
            SUPERVISOR_TOPIC: self.on_report,
            BOX_TOPIC: self.on_box_info,
        }

    async def on_box_info(self, message: BoxInfoRequest, ctx: RuntimeContext) -> BoxInfo:
        return self.info

    async def on_metrics(self, message: RuntimeMetrics, ctx: RuntimeContext) -> None:
        self.supervisor.heartbeat(message)

    async def on_report(self, message: SupervisorReport, ctx: RuntimeContext) -> None:
        self.supervisor.report_returned(message, ctx.metadata.sender)


def _pid_or_down(child: Child) -> str:
    """What ``ready`` shows for a child: its pid, or ``down``."""
    return "down" if child.state == "down" or child.proc is None else str(child.proc.pid)
