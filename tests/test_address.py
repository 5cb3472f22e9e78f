"""Bus addresses and the per-user ipc directory."""

from __future__ import annotations

import os
import stat

import pytest

from xrmq.actors.runtime import parse_bus, runtime_dir


def test_tcp_bus_uses_three_consecutive_ports():
    address = parse_bus("tcp://127.0.0.1:7000")
    assert (address.publish, address.subscribe, address.capture) == (
        "tcp://127.0.0.1:7000",
        "tcp://127.0.0.1:7001",
        "tcp://127.0.0.1:7002",
    )


def test_ipc_bus_uses_three_files_next_to_the_prefix():
    address = parse_bus("ipc:///run/x/bus")
    assert address.publish == "ipc:///run/x/bus.in" and address.subscribe == "ipc:///run/x/bus.out"
    assert [str(p) for p in address.ipc_paths] == [
        "/run/x/bus.in",
        "/run/x/bus.out",
        "/run/x/bus.capture",
    ]


def test_a_bus_name_lives_in_a_private_runtime_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XRMQ_RUNTIME_DIR", str(tmp_path / "rt"))
    address = parse_bus("default")
    assert address.publish == f"ipc://{tmp_path}/rt/default.in"
    assert stat.S_IMODE(os.stat(tmp_path / "rt").st_mode) == 0o700


def test_a_runtime_directory_open_to_others_is_refused(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    monkeypatch.setenv("XRMQ_RUNTIME_DIR", str(open_dir))
    with pytest.raises(ValueError, match="must not be accessible to other users"):
        runtime_dir()


@pytest.mark.parametrize(
    "bus, rule",
    [
        ("", "non-empty"),
        ("tcp://host", "tcp://HOST:PORT"),
        ("udp://x:1", "unsupported transport"),
        ("a/b", "must not contain '/'"),
        ("ipc://", "ipc://PATH-PREFIX"),
    ],
)
def test_bad_bus_strings_name_the_rule(bus, rule):
    with pytest.raises(ValueError, match=rule.replace("(", r"\(").replace("/", "/")):
        parse_bus(bus)
