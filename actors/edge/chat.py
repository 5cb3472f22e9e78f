"""``xrmq say`` and ``xrmq chat``: text front ends of an edge box.

``say`` publishes one ``UserQuery`` and prints the whole reply to it (router text
first), then exits: 0; 1 when the router ended the turn without an answer (a failed
model, no destination, a destination that restarted mid-turn), printing
``xrmq say: turn <status>: <Kind>: <cause>`` on stderr as soon as the router's
``TurnEnded`` arrives; 2 when no complete answer came within ``--timeout``. A reply
that failed mid-way is printed with `` [reply failed mid-way: <cause>]`` after what
came of it, by ``say`` and ``chat`` alike (``Turn.midway``).

``chat`` reads lines from stdin and asks each as a query of one participant, printing
the reply as it streams (``conversation: ...``); the next line is asked once the
reply is complete; a failed turn is shown (``xrmq chat: turn failed: ...`` on stderr)
and the chat goes on. A line starting with ``/`` is a chat command, never a query:
``/help`` lists them, ``/clear`` makes the edge box forget the participant everywhere (as
when they leave: a ``ParticipantLeft`` through the router, ``forget.py``) and prints once
the router confirmed it, or what did not forget, ``/compact [SECTION]`` compacts the
participant's context now and prints what happened (docs/tools.md), ``/compact toolcall
[DESTINATION]`` or ``/compact summary [DESTINATION]`` compacts the participant's
transcript at a tools destination (tier 1, or a summary; by default the destination
that answered last, else the box's only tools destination: the chat asks the running box
for its ``BoxInfo`` when it starts, and refuses at once a destination the box does not
run as ``kind = "tools"``), ``/retry`` drops the last answer and its question at the
tools destination that gave it and asks the question again, ``/revise TEXT`` asks TEXT
instead, ``/render FILE`` writes the participant's transcript at a tools destination as
an HTML page, ``/image PATH`` shows an image file to the model with the next question
(``chat_edits``), ``/quit`` (or end of input) leaves. On a
terminal, what is typed while a reply streams is not echoed into it: it is asked (and
shown) once the reply is complete. It talks to a running ``xrmq up``
on ``--bus``, or with ``--private-stack`` to a stack of the built-in default it starts
itself on a private bus (``PrivateStack``). It prints ``xrmq chat: ready ...`` once it
can take the first line.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from xrmq.actors.runtime import AgentRuntime

from .boxinfo import BOX_INFO_WAIT_S, ask_box_info, box_config
from .chat_edits import attach, render, take_back
from .config import EdgeConfig, reply_wait_s
from .config_loader import default_config
from .forget import ForgottenWaiter, failures
from .private_stack import PrivateStack
from .replies import ROUTER_SILENCE_S, ReplyCollector, Turn, ask
from .tool_compaction import compact

QUIT = "/quit"
COMPACT = "/compact"

HELP = """chat commands:
  /help   this list
  /clear  forget this participant: the edge box drops all it holds of them
  /compact [SECTION]  compact this participant's context now
  /compact toolcall|summary [DESTINATION]  compact this participant's transcript at a
                                           tools destination (default: the last to answer)
  /retry  drop the last answer (and its question) at the tools destination that gave it,
          and ask the question again
  /revise TEXT  drop the last answer and its question there, and ask TEXT instead
  /render FILE  write this participant's transcript at a tools destination as HTML
  /image PATH  show the image at PATH (PNG, JPEG, GIF, WebP; others with Pillow) to the
               model with the next question
  /quit   leave (end of input does the same)
anything else is asked as a query"""
FORGET_TIMEOUT_S = 10.0
"""How long ``/clear`` waits for the router to confirm the participant was forgotten."""
OUTCOME_GRACE_S = 1.0
"""How long ``say`` waits after a destination's final frame for the router's ``TurnEnded``."""


async def say(
    bus: str,
    participant_id: str,
    text: str,
    *,
    timeout: float,
    out: TextIO = sys.stdout,
    router_silence_s: float | None = ROUTER_SILENCE_S,
    follow_box: bool = False,
) -> int:
    """Ask ``text`` as ``participant_id`` and print the reply; ``TimeoutError`` if it is not
    complete in time. ``router_silence_s``: see ``ReplyCollector`` (None: no router watch).

    ``follow_box``: ``timeout`` is only the fallback; the wait is the running box's own
    (``reply_wait_s`` of the config its supervisor reports, asked while the query is
    already on its way), so the box reports a stalled model before this client gives up.
    """
    collector = ReplyCollector(router_silence_s=router_silence_s)
    runtime = AgentRuntime(bus, ready_timeout=min(timeout, 10.0))
    runtime.register("replies", collector, participant_id=participant_id)
    async with runtime:
        turn = ask(runtime, collector, participant_id, text)
        if follow_box:
            box = await ask_box_info(runtime, timeout=min(BOX_INFO_WAIT_S, timeout))
            if box is not None:
                timeout = reply_wait_s(box_config(box))
        await turn.wait(max(timeout - (time.monotonic() - turn.sent), 0.001), budget=timeout)
        if turn.outcome is None:
            await turn.wait_outcome(OUTCOME_GRACE_S)
    if turn.marked:
        print(turn.marked, file=out, flush=True)
    if turn.failure is not None:
        print(f"xrmq say: {turn.failure}", file=sys.stderr, flush=True)
        return 1
    return 0


class _StreamPrinter:
    """Prints the fragments of the chat's turns as they arrive, one line per response."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._open: tuple[str, str] | None = None
        self.last_source: str | None = None
        """The last destination (not the router) that replied: ``/compact``'s default."""

    def __call__(self, turn: Turn, source: str, text: str, final: bool) -> None:
        if source == "router" and turn.answer:
            return  # the apology for a mid-way failure: the chat prints ``Turn.midway``
        key = (turn.request_id, source)
        if text and source != "router":
            self.last_source = source
        if text:
            if self._open != key:
                self.close()
                self.out.write(f"{source}: ")
                self._open = key
            self.out.write(text)
            self.out.flush()
        if final and self._open == key and source == "router":
            self.close()  # a destination's line stays open for a mid-way failure's marker

    def close(self, marker: str = "") -> None:
        """End the open line, with ``marker`` (``Turn.midway``) after its text."""
        if self._open is not None:
            self.out.write(marker + "\n")
            self.out.flush()
            self._open = None
        elif marker:
            self.out.write(marker.strip() + "\n")
            self.out.flush()


def _read_lines(
    stream: TextIO, queue: asyncio.Queue[str | None], loop: asyncio.AbstractEventLoop
) -> None:
    """Feed ``stream``'s lines into ``queue`` (None at end of input), from a daemon thread.

    A thread, because a blocking read of a terminal or a file cannot be awaited
    portably; a daemon, so a read still waiting never keeps the process alive.
    """

    def run() -> None:
        for line in stream:
            loop.call_soon_threadsafe(queue.put_nowait, line.rstrip("\n"))
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=run, name="xrmq-chat-stdin", daemon=True).start()


@contextlib.contextmanager
def _no_echo(stream: TextIO) -> Iterator[None]:
    """On a terminal, do not echo typed input while a reply streams (it stays buffered
    and is read, and shown, after the reply)."""
    try:
        import termios

        fd = stream.fileno()
        saved = termios.tcgetattr(fd) if stream.isatty() else None
    except (ImportError, OSError, ValueError, AttributeError):
        saved = None
    if saved is None:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


async def chat(
    bus: str,
    participant_id: str,
    *,
    timeout: float,
    stdin: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    config: EdgeConfig | None = None,
    router_silence_s: float | None = ROUTER_SILENCE_S,
) -> int:
    """The chat loop on ``bus`` (see the module docstring); 0 when the user leaves.
    ``router_silence_s``: see ``ReplyCollector`` (None: no router watch)."""
    printer = _StreamPrinter(out)
    collector = ReplyCollector(on_fragment=printer, router_silence_s=router_silence_s)
    runtime = AgentRuntime(bus, ready_timeout=10.0)
    runtime.register("replies", collector, participant_id=participant_id)
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    prompt = "you> " if stdin.isatty() else ""
    async with runtime:
        box_asked = asyncio.ensure_future(ask_box_info(runtime))  # for /compact toolcall
        _read_lines(stdin, lines, asyncio.get_running_loop())
        print(
            f"xrmq chat: ready participant={participant_id} bus={bus} "
            f"(type /help for commands, {QUIT} or end input to leave)",
            file=out,
            flush=True,
        )

        async def box_tools() -> list[str] | None:
            """The running box's tools destinations (asked when the chat started)."""
            box = await box_asked
            return None if box is None else list(box.tools_destinations())

        attached: list[str] = []  # /image: shown with the next question

        async def run_command(text: str) -> str | None:
            """Run the chat command ``text``; the question to ask next, if any."""
            command = text.split()[0]
            if command in ("/retry", "/revise"):
                said, again, images = await take_back(
                    runtime, participant_id, text, printer.last_source, tools=await box_tools()
                )
                print(said, file=out, flush=True)
                attached.extend(images)
                return again
            if command == "/image":
                print(attach(text[len("/image") :].strip(), attached), file=out, flush=True)
            elif command == "/render":
                said = await render(
                    runtime, participant_id, text, printer.last_source, tools=await box_tools()
                )
                print(said, file=out, flush=True)
            elif command == "/help":
                print(HELP, file=out, flush=True)
            elif command == COMPACT and text.split()[1:2] in (["toolcall"], ["summary"]):
                tools = await box_tools()
                done = await compact(
                    runtime, participant_id, text, printer.last_source, tools=tools
                )
                print(done, file=out, flush=True)
            elif command == COMPACT:
                from .context_commands import compact_in_chat

                argument = text[len(COMPACT) :].strip()
                outcome = await compact_in_chat(
                    config or box_config(await box_asked), bus, participant_id, argument
                )
                print(outcome, file=out, flush=True)
            elif command == "/clear":
                print(await clear(bus, participant_id), file=out, flush=True)
            else:
                print(
                    f"xrmq chat: unknown command {command!r} (/help lists them)",
                    file=out,
                    flush=True,
                )
            return None

        while True:
            out.write(prompt)
            out.flush()
            typed_while_muted = bool(prompt) and not lines.empty()  # not echoed by the terminal
            line = await lines.get()
            text = "" if line is None else line.strip()
            if typed_while_muted and line is not None:
                print(line, file=out, flush=True)
            if line is None or text == QUIT:
                break
            if not text:
                continue
            if text.startswith("/"):
                asked = await run_command(text)
                if asked is None:
                    continue
                text = asked  # /retry or /revise: the question to ask again
            images, attached[:] = tuple(attached), []
            turn = ask(runtime, collector, participant_id, text, images=images)
            with _no_echo(stdin):
                try:
                    await turn.wait(timeout)
                except TimeoutError as error:
                    printer.close()
                    print(f"xrmq chat: {error}", file=sys.stderr, flush=True)
                    continue
                if turn.outcome is None:  # a failure after the final frame is told next
                    await turn.wait_outcome(OUTCOME_GRACE_S)
            printer.close(turn.midway)
            if turn.failure is not None:
                print(f"xrmq chat: {turn.failure}", file=sys.stderr, flush=True)
        box_asked.cancel()
        await asyncio.gather(box_asked, return_exceptions=True)
    return 0


async def clear(bus: str, participant_id: str, *, timeout: float = FORGET_TIMEOUT_S) -> str:
    """Run ``/clear``: forget the participant through the router; the line to print.

    On a runtime of its own, joined for this command only: the chat itself subscribes to
    nothing more than its replies, so an identity allowed only that can still chat (and
    is told here what ``/clear`` needs)."""
    waiter = ForgottenWaiter()
    runtime = AgentRuntime(bus, ready_timeout=min(timeout, 10.0))
    runtime.register("forget", waiter, participant_id=participant_id)
    try:
        await runtime.start()
    except (TimeoutError, RuntimeError, OSError) as error:  # e.g. the identity may not
        return f"xrmq chat: /clear: {error}"
    try:
        forgotten = await waiter.forget(participant_id, timeout)
    except TimeoutError as error:
        return f"xrmq chat: /clear: {error} (is the box's router running?)"
    finally:
        await runtime.stop()
    missed = failures(forgotten)
    if missed:
        return f"xrmq chat: /clear: not forgotten everywhere: {'; '.join(missed)}"
    return f"xrmq chat: cleared {participant_id}: the edge box forgot all it held of them"


async def chat_private_stack(
    participant_id: str, *, timeout: float, stdin: TextIO = sys.stdin, out: TextIO = sys.stdout
) -> int:
    """``chat`` against a stack of the built-in default started here; 1 if the stack stops by
    itself."""
    print("xrmq chat: starting an edge stack on a private bus...", file=out, flush=True)
    async with PrivateStack(default_config()) as stack:
        session = asyncio.create_task(
            chat(
                stack.bus,
                participant_id,
                timeout=timeout,
                stdin=stdin,
                out=out,
                config=stack.config,
            )
        )
        failed = asyncio.create_task(stack.wait_failed())
        await asyncio.wait([session, failed], return_when=asyncio.FIRST_COMPLETED)
        if session.done():
            failed.cancel()
            return session.result()
        session.cancel()
        await asyncio.gather(session, return_exceptions=True)
        print(f"xrmq chat: {await failed}", file=sys.stderr, flush=True)
        return 1
