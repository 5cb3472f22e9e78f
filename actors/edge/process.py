"""One process of the edge box (``xrmq run``): what ``xrmq up`` spawns and a systemd unit runs.

The process builds its roles on one ``AgentRuntime`` connected to the configured bus,
starts it (ready once every subscription is live through the broker), publishes
``RuntimeMetrics`` as its heartbeat, prints ``xrmq run: ready <name> pid=<pid>`` on
stdout (the supervisor's readiness handshake), and runs until SIGINT or SIGTERM. Then
it shuts down in order: intake stops and in-flight work is cancelled (the runtime
stops every mailbox), actors drain and finalize in ``on_stop`` while the sockets are
still open (an answer's final frame still goes out), and the sockets close.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import TextIO

from xrmq.actors.runtime import AgentRuntime, get_logger
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
            raise ValueError(f"--shard: process {target!r} has {len(instances)} replica(s); shard must be in [0, {len(instances)})")
        return instances[shard]
    if shard != 0:
        raise ValueError(f"--shard: {target!r} is not a configured process, so it has one replica (shard 0)")
    try:
        resolve_role(target)
    except LookupError as error:
        processes = ", ".join(config.processes) or "none"
        raise ValueError(f"{target!r} is neither a process of {config.source} ({processes}) nor a role: {error}") from None
    return ProcessInstance(target, 0, 1, ProcessConfig(roles=[target]))


async def run_process(config: EdgeConfig, instance: ProcessInstance, *, out: TextIO = sys.stdout) -> None:
    """Build, start and run ``instance`` until SIGINT/SIGTERM, then stop it in order."""
    if instance.process in config.processes:
        builders = check_roles(config, instance.process)[instance.process]
    else:
        builders = [resolve_role(role) for role in instance.spec.roles]
    log = get_logger(process=instance.runtime_name)
    if instance.spec.nice:
        os.nice(instance.spec.nice)  # background roles yield the CPU to the answer path
    keys = {}
    if config.bus.security.mode == "none":  # a client's $XRMQ_KEY is not this process's
        for variable in (KEY_ENV, SERVER_KEY_ENV):
            os.environ.pop(variable, None)
    if config.bus.security.mode == "curve":
        from .identities import broker_public_file, process_key_file

        keys = {"key": process_key_file(config, instance.process),
                "server_key": broker_public_file(config)}
    runtime = AgentRuntime(config.bus.address, name=instance.runtime_name,
                           metrics_interval=config.supervisor.metrics_interval_s,
                           ready_timeout=config.supervisor.ready_timeout_s, **keys)
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
