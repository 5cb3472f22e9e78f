"""Test harness: ``async def`` tests run on a fresh event loop each.

The loop is the one xrmq's own processes run on (``xrmq.actors.runtime.run``: uvloop
where installed). Tests marked ``both_loops`` (the runtime's core) run on asyncio's own
loop as well, since an application may host a runtime on any asyncio loop.

The project's fixed test dependencies are pytest, pytest-timeout and pytest-xdist; this
hook is all the asyncio support the suite needs (pytest-timeout bounds every test). The
suite runs a worker per core (``-n auto --dist loadfile``, the README's command): each
session fixture here gives a worker directories of its own.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator

import pytest
import structlog

from xrmq.actors.runtime import event_loop_name, run


@pytest.fixture(autouse=True, scope="session")
def private_state_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Context journals of edge stacks started without a ``state_dir`` (their default is
    under ``$XDG_STATE_HOME``) go to the session's temporary directory, never the home."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))


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


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = inspect.signature(pyfuncitem.obj).parameters  # the test's own arguments
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    loop = pyfuncitem.funcargs["event_loop_kind"]
    assert isinstance(loop, str)  # the event_loop_kind fixture's value
    run(pyfuncitem.obj(**kwargs), loop=loop)
    return True
