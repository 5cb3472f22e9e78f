"""Issue 13, item 9: an ipc bus another local user could reach is refused; sockets are 0600.

Each refusal is one ``UnsafeDirectoryError`` naming the path and ``XRMQ_RUNTIME_DIR``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.runtime.address import UnsafeDirectoryError, parse_bus, runtime_dir
from xrmq.actors.runtime.broker import Broker

pytestmark = pytest.mark.timeout(60)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_sockets_are_0600_and_the_lock_file_too_under_umask_000(tmp_path):
    directory = tmp_path / "bus"
    directory.mkdir(mode=0o700)
    old = os.umask(0)
    try:
        broker = Broker(parse_bus(f"ipc://{directory}/b"), capture=True).start()
    finally:
        os.umask(old)
    try:
        files = sorted(directory.iterdir())
        assert [path.name for path in files] == ["b.capture", "b.in", "b.lock", "b.out"]
        assert {path.name: mode(path) for path in files} == dict.fromkeys(
            ["b.capture", "b.in", "b.lock", "b.out"], 0o600
        )
    finally:
        broker.stop()


def test_a_named_bus_under_umask_000_gets_a_0700_runtime_directory_and_0600_sockets(tmp_path):
    run = tmp_path / "run"
    script = (
        "import os; os.umask(0)\n"
        "from xrmq.actors.runtime.address import parse_bus\n"
        "from xrmq.actors.runtime.broker import Broker\n"
        "b = Broker(parse_bus('mybus')).start()\n"
        "import pathlib, stat\n"
        "d = pathlib.Path(os.environ['XRMQ_RUNTIME_DIR'])\n"
        "print(oct(stat.S_IMODE(d.stat().st_mode)), sorted(oct(stat.S_IMODE(p.stat().st_mode)) "
        "for p in d.iterdir()))\n"
        "b.stop()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "XRMQ_RUNTIME_DIR": str(run), "XRMQ_LOG_LEVEL": "ERROR"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0o700 ['0o600', '0o600', '0o600']"


@pytest.mark.parametrize("dir_mode", [0o777, 0o775, 0o1777])
async def test_an_explicit_prefix_in_a_directory_others_can_write_is_refused_by_broker_and_runtime(
    tmp_path, dir_mode
):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(dir_mode)
    address = parse_bus(f"ipc://{shared}/bus")
    with pytest.raises(UnsafeDirectoryError) as refused:
        Broker(address).start()
    message = str(refused.value)
    assert (
        str(shared) in message
        and "writable by other users" in message
        and "XRMQ_RUNTIME_DIR" in message
    )
    with pytest.raises(UnsafeDirectoryError, match="writable by other users"):
        await AgentRuntime(f"ipc://{shared}/bus", ready_timeout=1).start()
    assert list(shared.iterdir()) == []  # nothing was created there


async def test_a_symlinked_prefix_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(
        UnsafeDirectoryError, match=f"directory {link} of the ipc endpoints is a symlink"
    ):
        Broker(parse_bus(f"ipc://{link}/bus")).start()


def test_a_symlinked_or_open_runtime_directory_is_refused_naming_the_path_and_xrmq_runtime_dir(
    tmp_path, monkeypatch
):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("XRMQ_RUNTIME_DIR", str(link))
    with pytest.raises(UnsafeDirectoryError) as refused:
        runtime_dir()
    assert str(refused.value).startswith(f"bus: runtime directory {link} is a symlink")
    assert "XRMQ_RUNTIME_DIR" in str(refused.value)
    with pytest.raises(UnsafeDirectoryError):
        parse_bus("default")
    real.chmod(0o755)
    monkeypatch.setenv("XRMQ_RUNTIME_DIR", str(real))
    with pytest.raises(UnsafeDirectoryError, match=r"mode 0755, needs 0700.*XRMQ_RUNTIME_DIR"):
        runtime_dir()
