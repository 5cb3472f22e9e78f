"""The event loop of xrmq's own processes: uvloop by default, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime import event_loop_name, run

pytestmark = pytest.mark.timeout(10)


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_processes_run_on_uvloop_by_default(monkeypatch):
    monkeypatch.delenv("XRMQ_EVENT_LOOP", raising=False)
    assert event_loop_name() == "uvloop"
    assert run(loop_module()).startswith("uvloop")


def test_the_environment_can_choose_asyncios_own_loop(monkeypatch):
    monkeypatch.setenv("XRMQ_EVENT_LOOP", "asyncio")
    assert event_loop_name() == "asyncio"
    assert run(loop_module()).startswith("asyncio")


def test_an_explicit_loop_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("XRMQ_EVENT_LOOP", "asyncio")
    assert run(loop_module(), loop="uvloop").startswith("uvloop")


def test_an_unknown_loop_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("XRMQ_EVENT_LOOP", "trio")
    with pytest.raises(
        ValueError, match="XRMQ_EVENT_LOOP: must be one of uvloop, asyncio, got 'trio'"
    ):
        event_loop_name()
