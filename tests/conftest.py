"""Test harness: ``async def`` tests run on a fresh event loop each.

The loop is the one xrmq's own processes run on (``xrmq.actors.runtime.run``: uvloop
where installed). Tests marked ``both_loops`` (the runtime's core) run on asyncio's own
loop as well, since an application may host a runtime on any asyncio loop.

The project's fixed test dependencies are pytest, pytest-timeout and pytest-xdist; this
hook is all the asyncio support the suite needs. The suite runs a worker per core (``-n
auto --dist loadfile``, the README's command): each session fixture here gives a worker
directories of its own.

Every test has a timeout (pytest-timeout's: the ``timeout`` marker, else the configured
one). pytest-timeout's default method is SIGALRM, whose handler never runs while uvloop
waits (a hung ``async def`` test on uvloop hung the run), so an ``async def`` test is
bounded by its own event loop instead: at its timeout its task is cancelled (its
``finally`` blocks and ``async with`` exits run) and it fails as timed out. pytest-timeout
stays as the backstop, ``GRACE_S`` later and by a thread, for a loop that no longer runs
at all: it dumps every thread's stack and ends the run.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
import structlog

from xrmq.actors.runtime import event_loop_name, run


@pytest.fixture(autouse=True, scope="session")
def private_state_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Context journals of edge stacks started without a ``state_dir`` (their default is
    under ``$XDG_STATE_HOME``) go to the session's temporary directory, never the home."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))


@pytest.fixture(autouse=True, scope="session")
def private_pulse_runtime(tmp_path_factory: pytest.TempPathFactory) -> None:
    """espeak-ng loads PulseAudio's client, which on a machine's first use (no
    ``$XDG_RUNTIME_DIR``) makes its runtime directory ``pulse-XXXX`` in ``$TMPDIR``: inside a
    test's own ``tmp_path`` when the test sets ``TMPDIR``, whose emptiness the test checks
    (seen on a fresh CI machine, never after). Its own directory, here, for every process."""
    directory = tmp_path_factory.mktemp("pulse")
    directory.chmod(0o700)
    os.environ.setdefault("PULSE_RUNTIME_PATH", str(directory))


@pytest.fixture(autouse=True, scope="session")
def private_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Bus names (``default`` and the rest) resolve to sockets in the session's own runtime
    directory, never the user's: a box the developer is running, or another test session
    (a parallel worker), is never connected to or replaced. Tests that set
    ``XRMQ_RUNTIME_DIR`` themselves still win."""
    directory = tmp_path_factory.mktemp("runtime")
    directory.chmod(0o700)
    os.environ["XRMQ_RUNTIME_DIR"] = str(directory)


# The log level the suite was started with, read before collection imports anything
# (a module that changed the environment at import would otherwise set it for every test).
_LOG_LEVEL = os.environ.get("XRMQ_LOG_LEVEL")


@pytest.fixture(autouse=True)
def isolated_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Undo what a test running the CLI in-process does to the whole process's logging.

    ``xrmq.actors.cli.main`` configures structlog once per process at the command's level
    (WARNING for one-shot commands, ERROR with ``-q``) and exports ``-q``/``-v`` as
    ``XRMQ_LOG_LEVEL`` for the processes it starts: left in place, later tests would see
    no warnings in ``capture_logs`` and start subprocesses that log nothing below ERROR.
    Logging is configured before the test, so a first ``get_logger`` inside a test's
    ``capture_logs`` block cannot replace the capturing configuration.
    """
    from xrmq.actors import logs

    if _LOG_LEVEL is None:  # set through monkeypatch, so whatever the test sets is undone
        monkeypatch.delenv("XRMQ_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("XRMQ_LOG_LEVEL", _LOG_LEVEL)
    structlog.reset_defaults()  # whatever an earlier test configured or cached
    logs._configured = False
    logs.configure_logging()
    config, configured = structlog.get_config(), logs._configured
    yield
    if logs._configured != configured or structlog.get_config() != config:
        structlog.configure(**config)
        logs._configured = configured


@pytest.fixture(autouse=True)
def event_loop_kind(request: pytest.FixtureRequest) -> str:
    """The event loop an async test runs on (parametrized for ``both_loops`` tests)."""
    return getattr(request, "param", None) or event_loop_name()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_loops") and inspect.iscoroutinefunction(
        metafunc.function
    ):
        metafunc.parametrize(
            "event_loop_kind", sorted({event_loop_name(), "asyncio"}), indirect=True
        )


GRACE_S = 15.0
"""How long past its timeout an ``async def`` test's loop may take to cancel it before the
backstop (pytest-timeout, by a thread) ends the run."""

_TIMEOUT = pytest.StashKey[float]()


def timeout_of(item: pytest.Item) -> float:
    """The item's timeout as pytest-timeout reads it (0: none): its closest ``timeout``
    marker, else ``--timeout``, ``$PYTEST_TIMEOUT`` or the ``timeout`` ini option."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        if value is not None:
            return float(value)
    config = item.config
    value = config.getoption("timeout", None) or os.environ.get("PYTEST_TIMEOUT")
    return float(value or config.getini("timeout") or 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            seconds = item.stash[_TIMEOUT] = timeout_of(item)
            if seconds > 0:  # the backstop: closest, so it replaces the test's own
                backstop = pytest.mark.timeout(seconds + GRACE_S, method="thread")
                item.add_marker(backstop, append=False)


async def _bounded(test: Coroutine[Any, Any, Any], seconds: float, name: str) -> Any:
    """Await ``test``, cancelled at ``seconds`` (0: never) and then failed as timed out; a
    ``TimeoutError`` of the test's own stays its own failure."""
    if not seconds:
        return await test
    try:
        async with asyncio.timeout(seconds) as scope:
            return await test
    except TimeoutError:
        if not scope.expired():
            raise
    pytest.fail(f"Timeout: {name} did not finish within {seconds:g} s", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = inspect.signature(pyfuncitem.obj).parameters  # the test's own arguments
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    loop = pyfuncitem.funcargs["event_loop_kind"]
    assert isinstance(loop, str)  # the event_loop_kind fixture's value
    seconds = pyfuncitem.stash.get(_TIMEOUT, 0.0)
    run(_bounded(pyfuncitem.obj(**kwargs), seconds, pyfuncitem.name), loop=loop)
    return True
