"""``xrmq context dump|load|show|clear|compact`` and ``/compact`` in ``xrmq chat`` against a
running edge stack (issue 15, docs/tools.md). Every command is a real ``xrmq`` process on the
stack's bus with the stack's config file."""

from __future__ import annotations

import asyncio
import io
import sys

import pytest

from xrmq.actors.context.dump import decode_dump
from xrmq.actors.edge.config_loader import decode_config, default_config
from xrmq.actors.edge.context_commands import with_manager
from xrmq.actors.edge.private_stack import PrivateStack
from xrmq.actors.edge.replies import ReplyCollector, ask
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

from edge_box import journal_rows_of
from openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.timeout(120)


async def xrmq(*args: str, stdin: bytes | None = None) -> tuple[int, bytes, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xrmq.actors.cli",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None  # communicate() waited for the exit
    return proc.returncode, out, err.decode()


async def test_dump_clear_load_show_and_compact_a_participant_of_a_running_box(tmp_path):
    async with PrivateStack(default_config()) as stack:
        config = str(stack.directory / "edge.toml")
        collector = ReplyCollector()
        client = AgentRuntime(stack.bus, name="test-client")
        client.register("replies", collector)
        async with client:
            for text in (
                "The kettle in lab 3 is set to 85 degrees.",
                "Printer PR-7 is out of toner.",
            ):
                await client.publish(
                    context_topic("notes"),
                    ConversationContextUpdate(text),
                    participant_id="p1",
                    source="sensor",
                )
            for text in ("My badge number is 4471.", "Where is the kettle?"):
                await ask(client, collector, "p1", text).wait(20)

            async def show() -> str:
                code, out, err = await xrmq(
                    "context", "show", "--participant", "p1", "--config", config
                )
                assert code == 0, err
                return out.decode()

            shown = await show()
            assert "dialogue (dialogue): " in shown and " / 8000 bytes" in shown
            assert "notes (incremental): " in shown and " / 4000 bytes" in shown
            assert "85 degrees" in shown and "My badge number is 4471." in shown
            assert shown.rstrip().splitlines()[-1].startswith("Current time: ")

            code, data, err = await xrmq(
                "context", "dump", "--participant", "p1", "--config", config
            )
            assert code == 0, err
            assert [p.participant_id for p in decode_dump(data).participants] == ["p1"]
            (tmp_path / "p1.dump").write_bytes(data)

            code, out, err = await xrmq(
                "context", "clear", "--participant", "p1", "--config", config
            )
            assert (code, out.decode().strip()) == (0, "xrmq context: cleared p1"), err
            assert "[notes] The kettle" not in await show()

            for _ in range(2):  # loading twice records nothing twice
                code, out, err = await xrmq(
                    "context", "load", str(tmp_path / "p1.dump"), "--config", config
                )
                assert code == 0 and "loaded 2 section(s)" in out.decode(), err
            restored = await show()
            assert restored.count("[notes] The kettle in lab 3 is set to 85 degrees.") == 1
            assert restored.count("User: My badge number is 4471.") == 1
            # the same sizes as before the clear
            assert restored.splitlines()[:3] == shown.splitlines()[:3]

            code, out, err = await xrmq(
                "context", "compact", "--participant", "p1", "--config", config
            )
            assert code == 0, err
            # what made the summary: the box's (offline) model, whose summaries pass the guards
            assert "dialogue: compacted into its summary by the model" in out.decode()
            assert "notes: compacted into its summary by the model" in out.decode()
            assert "Summary of earlier [notes] context:" in await show()

            code, out, err = await xrmq(
                "context",
                "compact",
                "--participant",
                "p1",
                "--section",
                "notes",
                "--config",
                config,
            )
            assert (code, out.decode().strip()) == (
                0,
                "notes: nothing to compact (NOTHING_TO_CONDENSE)",
            ), err

            code, out, _ = await xrmq(
                "chat",
                "--bus",
                stack.bus,
                "--config",
                config,
                "--participant",
                "p2",
                stdin=b"/compact\n/compact nowhere\n/quit\n",
            )
            lines = out.decode().splitlines()
            assert code == 0
            assert "dialogue: nothing to compact (NOTHING_TO_CONDENSE)" in lines
            assert any(
                line.startswith("/compact: section: must be 'dialogue' or an incremental topic")
                for line in lines
            )


async def test_a_context_command_without_a_running_box_says_so(tmp_path):
    code, _, err = await xrmq(
        "context",
        "show",
        "--participant",
        "p1",
        "--bus",
        f"ipc://{tmp_path}/none",
        "--timeout",
        "0.5",
    )
    assert code == 2 and "xrmq context:" in err


async def test_context_clear_forgets_the_participant_everywhere_on_a_running_box():
    async with PrivateStack(default_config()) as stack:
        assert stack.directory is not None
        config = str(stack.directory / "edge.toml")
        collector = ReplyCollector()
        client = AgentRuntime(stack.bus, name="test-client")
        client.register("replies", collector)
        async with client:
            said = ask(client, collector, "p2", "The freezer in room 210 is at minus 80.")
            await said.wait(20)
            before = ask(client, collector, "p2", "What is the freezer at?")
            await before.wait(20)
            assert "minus 80" in before.answer  # the box answers from what p2 said
            assert any("minus 80" in row for _, row in journal_rows_of(stack.directory, "p2"))

            code, out, err = await xrmq(
                "context", "clear", "--participant", "p2", "--config", config
            )
            assert (code, out.decode().strip()) == (0, "xrmq context: cleared p2"), err

            code, data, err = await xrmq(
                "context", "dump", "--participant", "p2", "--config", config
            )
            assert code == 0, err
            assert decode_dump(data).participants == ()
            assert journal_rows_of(stack.directory, "p2") == []

            after = ask(client, collector, "p2", "What is the freezer at?")
            await after.wait(20)
            assert "minus 80" not in after.spoken, after.spoken
            code, data, err = await xrmq(
                "context", "dump", "--participant", "p2", "--config", config
            )
            assert code == 0, err
            assert b"minus 80" not in data
            assert not any("minus 80" in row for _, row in journal_rows_of(stack.directory, "p2"))


async def test_context_clear_on_a_box_without_a_router_clears_the_context_and_says_so():
    import msgspec

    config = default_config()
    processes = {name: spec for name, spec in config.processes.items() if name == "context"}
    async with PrivateStack(msgspec.structs.replace(config, processes=processes)) as stack:
        assert stack.directory is not None
        path = str(stack.directory / "edge.toml")
        assert stack.config is not None
        await with_manager(  # returns once the notes section applied it
            stack.config,
            stack.bus,
            lambda manager: manager.update(
                "p3",
                "notes",
                ConversationContextUpdate("The freezer in room 210 is at minus 80."),
                mode="incremental",
            ),
        )
        code, data, err = await xrmq("context", "dump", "--participant", "p3", "--config", path)
        assert code == 0 and b"minus 80" in data, err

        code, out, err = await xrmq("context", "clear", "--participant", "p3", "--config", path)
        assert (code, out.decode().strip()) == (
            0,
            "xrmq context: cleared p3's context "
            "(the config runs no router: no destination was asked to forget them)",
        ), err
        code, data, err = await xrmq("context", "dump", "--participant", "p3", "--config", path)
        assert code == 0 and decode_dump(data).participants == (), err


async def test_context_clear_without_the_routers_confirmation_clears_the_context_and_exits_1():
    import io

    from xrmq.actors.edge.context_commands import clear
    from xrmq.actors.edge.forget import ForgottenWaiter

    class Manager:
        def __init__(self) -> None:
            self.cleared: list[str] = []

        async def clear(self, participant_id: str) -> None:
            self.cleared.append(participant_id)

    manager = Manager()
    runtime = AgentRuntime(name="no-router-here")  # an embedded bus nobody routes on
    waiter = runtime.register("forget", ForgottenWaiter(source="xrmq-context"))
    out, err = io.StringIO(), io.StringIO()
    async with runtime:
        code = await clear(manager, "p2", out, waiter=waiter, timeout=0.2, err=err)
    assert (code, manager.cleared, out.getvalue()) == (1, ["p2"], "")
    assert err.getvalue().splitlines() == [
        "xrmq context: cleared p2's context, but not everywhere:",
        "  router: no router confirmed forgetting p2 within 0.2s "
        "(its turn history and the destinations may keep them)",
    ]


def test_a_dump_to_a_terminal_is_refused_naming_output(monkeypatch):
    """A dump is MessagePack: written to a terminal it is noise, so it asks for a file."""
    from xrmq.actors.cli import build_parser
    from xrmq.actors.edge.context_commands import run_context

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    args = build_parser().parse_args(["context", "dump", "--participant", "p1"])
    with pytest.raises(ValueError, match="--output: a dump is binary"):
        run_context(args)


async def test_context_compact_says_the_extractive_fallback_made_the_summary_of_a_lossy_model(
    monkeypatch,
):
    """The box's compaction model (a provider on loopback) describes the notes without their
    values: the summary guards refuse it, and ``xrmq context compact`` compacts by the
    extractive fallback at once and says so."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    lossy = Reply(chunks=("These notes record readings from the lab's instruments.",))
    with OpenAIServer(lossy) as provider:
        config = decode_config(
            {
                "models": {
                    "compaction": {"model": "openai/gpt-4o-mini", "api_base": provider.api_base}
                },
                "context": {"topics": {"notes": {"mode": "incremental"}}},
                "processes": {
                    "context": {"roles": ["context"]},
                    "compaction": {"roles": ["compaction"], "after": ["context"]},
                },
            }
        )
        async with PrivateStack(config) as stack:
            assert stack.directory is not None and stack.config is not None
            path = str(stack.directory / "edge.toml")
            notes = (
                "The kettle in lab 3 is set to 85 degrees.",
                "Printer PR-7 is out of toner.",
                "The badge reader at door D12 reads 4471.",
            )
            for text in notes:
                await with_manager(  # returns once the notes section applied it
                    stack.config,
                    stack.bus,
                    lambda manager, text=text: manager.update(
                        "p4", "notes", ConversationContextUpdate(text), mode="incremental"
                    ),
                )
            code, out, err = await xrmq(
                "context", "compact", "--participant", "p4", "--section", "notes", "--config", path
            )
            assert code == 0, err
            assert out.decode().strip() == (
                "notes: compacted into its summary by the extractive fallback "
                "(the model's summaries failed or were refused)"
            )
            code, shown, err = await xrmq(
                "context", "show", "--participant", "p4", "--config", path
            )
            assert code == 0, err
    assert len(provider.requests) >= 2  # asked, refused, asked a smaller batch
    text = shown.decode()
    assert "Summary of earlier [notes] context:" in text
    for value in ("85 degrees", "PR-7", "D12", "4471"):
        assert value in text
