"""One process of the edge box (``xrmq run``): what ``xrmq up`` spawns and a systemd unit runs.

The process builds its roles on one ``AgentRuntime`` connected to the configured bus,
starts it (ready once every subscription is live through the broker), publishes
``RuntimeMetrics`` as its heartbeat, prints ``xrmq run: ready <name> pid=<pid>`` on
stdout (the supervisor's readiness handshake), and runs until SIGINT or SIGTERM. Then
it shuts down in order: actors finish or finalize their work in ``on_stop`` while the
runtime still reads, publishes and heartbeats (the router lets answers in flight end,
an answer's final frame still goes out, a cancelled remote call's end still arrives),
then intake stops, what is left is cancelled and the sockets close.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any, NoReturn, TextIO

from xrmq.actors.runtime import AgentRuntime, get_logger
from xrmq.actors.runtime.broker import shared_context
from xrmq.actors.runtime.security.keys import KEY_ENV, SERVER_KEY_ENV

from .config import EdgeConfig, ProcessConfig, ProcessInstance
from .roles import check_roles, resolve_role

READY_PREFIX = "xrmq run: ready"


def select_instance(config: EdgeConfig, target: str, shard: int) -> ProcessInstance:
    """The process ``target`` names: a configured process (replica ``shard``), else one role alone.

    Raises ``ValueError`` naming the rule for an unknown target or a shard out of range.
    """
    if target in config.processes:
        instances = config.instances(target)
        if not 0 <= shard < len(instances):
            raise ValueError(
                f"--shard: process {target!r} has {len(instances)} replica(s); shard must be in "
                f"[0, {len(instances)})"
            )
        return instances[shard]
    if shard != 0:
        raise ValueError(
            f"--shard: {target!r} is not a configured process, so it has one replica (shard 0)"
        )
    try:
        resolve_role(target)
    except LookupError as error:
        processes = ", ".join(config.processes) or "none"
        raise ValueError(
            f"{target!r} is neither a process of {config.source} ({processes}) nor a role: {error}"
        ) from None
    return ProcessInstance(target, 0, 1, ProcessConfig(roles=[target]))


async def run_process(
    config: EdgeConfig, instance: ProcessInstance, *, out: TextIO = sys.stdout
) -> None:
    """Build, start and run ``instance`` until SIGINT/SIGTERM, then stop it in order."""
    if instance.process in config.processes:
        builders = check_roles(config, instance.process)[instance.process]
    else:
        builders = [resolve_role(role) for role in instance.spec.roles]
    log = get_logger(process=instance.runtime_name)
    if instance.spec.nice:
        os.nice(instance.spec.nice)  # background roles yield the CPU to the answer path
    keys: dict[str, Any] = {}
    if config.bus.security.mode == "none":  # a client's $XRMQ_KEY is not this process's
        for variable in (KEY_ENV, SERVER_KEY_ENV):
            os.environ.pop(variable, None)
    if config.bus.security.mode == "curve":
        from .identities import broker_public_file, process_key_file

        keys = {
            "key": process_key_file(config, instance.process),
            "server_key": broker_public_file(config),
        }
    runtime = AgentRuntime(
        config.bus.address,
        name=instance.runtime_name,
        metrics_interval=config.supervisor.metrics_interval_s,
        max_message_bytes=config.bus.max_message_bytes,
        stuck_after=config.supervisor.stuck_after_s,
        ready_timeout=config.supervisor.ready_timeout_s,
        **keys,
    )
    for build in builders:
        build(runtime, config, instance)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await runtime.start()
        print(f"{READY_PREFIX} {instance.runtime_name} pid={os.getpid()}", file=out, flush=True)
        await stop.wait()
        log.info("process.stopping")
    finally:
        await runtime.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    print(f"xrmq run: stopped {instance.runtime_name}", file=out, flush=True)


EXIT_LINGER_MS = 2000
"""How long a socket left open at exit may still send what it holds (the runtime's own linger)."""


def exit_process(code: int) -> NoReturn:
    """End a stopped ``xrmq run`` (or ``xrmq up``) process at once: flush, skip the teardown.

    Why: the interpreter's teardown of the imported module graph takes 0.2-0.4 s per
    process, and ``xrmq up`` stops its processes layer after layer, so it added about a
    second to every shutdown. The ZeroMQ context is terminated first (every queued
    message still goes out, within the sockets' linger), then logging and the standard
    streams are flushed. Call it only once the runtime has stopped.
    """
    shared_context().destroy(linger=EXIT_LINGER_MS)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
