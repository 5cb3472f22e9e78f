"""Roles for the supervisor's tests, named in test configs as ``edge_roles:<function>``.

``echo`` answers asks on ``edge.echo`` with the process's runtime name, so a test sees
which incarnation answered; ``fail`` makes its process exit before it is ready.
"""

from __future__ import annotations

from xrmq.actors.runtime import Agent, RuntimeContext, subscribe
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

ECHO_TOPIC = context_topic("edge.echo")


class Echo(Agent):
    def __init__(self, process: str) -> None:
        self.process = process

    @subscribe(ECHO_TOPIC)
    async def on_echo(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> str:
        return f"{self.process}:{message.text}"


def echo(runtime, config, process) -> None:
    runtime.register("echo", Echo(process.runtime_name))


def fail(runtime, config, process) -> None:
    raise RuntimeError("this role always fails")
