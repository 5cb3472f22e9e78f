"""The runtime's private-API uses are contained in ``_compat``, and its fallbacks work.

The fallback test runs the mailbox and runtime suites in a fresh interpreter with
``XRMQ_COMPAT_FALLBACK=1``, so every module binds the public fallbacks at import, as it
would on a CPython or pyzmq without the private names.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from xrmq.actors.runtime import _compat

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_NAMES = ("_enter_task", "_leave_task", "zmq.backend")


def _fallback_env() -> dict[str, str]:
    return {**os.environ, "XRMQ_COMPAT_FALLBACK": "1"}


def test_the_fast_paths_are_used_where_the_private_apis_exist() -> None:
    has_task_switch = hasattr(asyncio.tasks, "_enter_task") and hasattr(
        asyncio.tasks, "_leave_task"
    )
    assert _compat.INLINE_START is (has_task_switch and not _compat.FORCED_FALLBACK)
    backend = getattr(getattr(zmq, "backend", None), "Socket", None)
    assert _compat.FAST_SEND is (backend is not None and not _compat.FORCED_FALLBACK)


def test_no_module_but_compat_names_a_private_api() -> None:
    offenders = []
    for package in ("actors", "schemas", "topics", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "_compat.py":
                continue
            text = path.read_text(encoding="utf-8")
            offenders += [
                f"{path.relative_to(ROOT)}: {name}" for name in PRIVATE_NAMES if name in text
            ]
    assert offenders == []


def test_the_fallback_is_what_the_switch_selects() -> None:
    probe = (
        "import zmq; from xrmq.actors.runtime import _compat as c; "
        "print(c.INLINE_START, c.FAST_SEND, c.frame_send is zmq.Socket.send)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=_fallback_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.split() == ["False", "False", "True"]


@pytest.mark.timeout(300)
def test_the_mailbox_and_runtime_suites_pass_on_the_fallback_path() -> None:
    suites = ["tests/test_mailbox_inline.py", "tests/test_runtime.py", "tests/test_reply.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", *suites],
        cwd=ROOT,
        env=_fallback_env(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
