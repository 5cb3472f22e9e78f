"""Bus addresses: where a broker binds and where runtimes connect.

One bus has three endpoints: ``publish`` (the broker's XSUB; publishers connect),
``subscribe`` (the broker's XPUB; subscribers connect) and ``capture`` (a PUB carrying a
copy of every message, for record/replay). A bus is named by one string:

- ``NAME`` (no scheme, e.g. ``default``): ``ipc://`` sockets ``NAME.in``/``NAME.out``/
  ``NAME.capture`` in the per-user runtime directory (mode 0700);
- ``ipc:///path/prefix``: the same files next to ``prefix``;
- ``tcp://HOST:PORT``: ports PORT, PORT+1, PORT+2;
- ``inproc://NAME``: in-process endpoints (the embedded bus; one zmq context).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import msgspec

DEFAULT_BUS = "default"


class BusAddress(msgspec.Struct, frozen=True):
    """The three endpoints of one bus."""

    publish: str
    subscribe: str
    capture: str

    @property
    def ipc_paths(self) -> tuple[Path, ...]:
        """Socket files of an ``ipc://`` bus (empty for other transports)."""
        return tuple(
            Path(endpoint[len("ipc://") :])
            for endpoint in (self.publish, self.subscribe, self.capture)
            if endpoint.startswith("ipc://")
        )


class UnsafeDirectoryError(ValueError):
    """An ipc endpoint's directory could let another local user reach or replace the sockets."""


def runtime_dir() -> Path:
    """The per-user directory for ipc sockets, created with mode 0700.

    ``$XRMQ_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/xrmq``, else ``/tmp/xrmq-<uid>``.
    Refuses a symlink, a directory owned by another user or one open to others: anyone
    who can reach the sockets can publish on the bus.
    """
    base = os.environ.get("XRMQ_RUNTIME_DIR")
    if base:
        path = Path(base)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "xrmq"
    else:
        path = Path(f"/tmp/xrmq-{os.getuid()}")
    if not path.is_symlink():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeDirectoryError(
            f"bus: runtime directory {path} is a symlink (refused: it could point anywhere); "
            "set XRMQ_RUNTIME_DIR to a real directory of mode 0700"
        )
    if info.st_uid != os.getuid():
        raise UnsafeDirectoryError(
            f"bus: runtime directory {path} must be owned by uid {os.getuid()}; "
            "set XRMQ_RUNTIME_DIR to a directory of yours"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UnsafeDirectoryError(
            f"bus: runtime directory {path} must not be accessible to other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o}, needs 0700); fix it or set XRMQ_RUNTIME_DIR"
        )
    return path


def check_ipc_directories(address: BusAddress) -> None:
    """Refuse an ipc bus whose socket directory another local user could write to.

    The directory of each endpoint (an explicit ``ipc:///path/prefix`` included) must be
    a real directory (not a symlink) owned by this user and writable by nobody else;
    otherwise another user could replace the sockets. Called before binding or
    connecting; ``UnsafeDirectoryError`` names the path and ``XRMQ_RUNTIME_DIR``.
    """
    for directory in {path.parent for path in address.ipc_paths}:
        try:
            info = os.lstat(directory)
        except FileNotFoundError:
            raise UnsafeDirectoryError(
                f"bus: directory {directory} of the ipc endpoints does not exist; create it "
                "(mode 0700) or use a bus name (sockets in XRMQ_RUNTIME_DIR)"
            ) from None
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            problem = "is a symlink"
        elif info.st_uid != os.getuid():
            problem = f"is owned by uid {info.st_uid}, not {os.getuid()}"
        elif mode & 0o022:
            problem = f"is writable by other users (mode {mode:04o})"
        else:
            continue
        raise UnsafeDirectoryError(
            f"bus: directory {directory} of the ipc endpoints {problem}; use a directory only "
            "you can write (mode 0700), or a bus name (sockets in XRMQ_RUNTIME_DIR)"
        )


def parse_bus(bus: str) -> BusAddress:
    """Turn a bus string into its endpoints; ``ValueError`` naming the rule otherwise."""
    if not bus:
        raise ValueError("bus: must be a non-empty name or endpoint")
    if bus.startswith("tcp://"):
        host, sep, port = bus[len("tcp://") :].rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65534:
            raise ValueError(f"bus: {bus!r} must be tcp://HOST:PORT with PORT below 65534")
        first = int(port)
        return BusAddress(*(f"tcp://{host}:{first + offset}" for offset in range(3)))
    if bus.startswith("ipc://"):
        prefix = bus[len("ipc://") :]
        if not prefix or prefix.endswith("/"):
            raise ValueError(f"bus: {bus!r} must be ipc://PATH-PREFIX")
        return BusAddress(f"ipc://{prefix}.in", f"ipc://{prefix}.out", f"ipc://{prefix}.capture")
    if bus.startswith("inproc://"):
        name = bus[len("inproc://") :]
        if not name:
            raise ValueError(f"bus: {bus!r} must be inproc://NAME")
        return BusAddress(f"inproc://{name}.in", f"inproc://{name}.out", f"inproc://{name}.capture")
    if "://" in bus:
        raise ValueError(
            f"bus: {bus!r} has an unsupported transport (use ipc://, tcp:// or inproc://)"
        )
    if "/" in bus:
        raise ValueError(f"bus: name {bus!r} must not contain '/'")
    return parse_bus(f"ipc://{runtime_dir() / bus}")


_LOOPBACK = re.compile(r"^(?:127(?:\.\d{1,3}){3}|localhost|::1|\[::1\])$")


def is_loopback_tcp(bus: str) -> bool | None:
    """For a ``tcp://`` bus, whether its host is loopback only; None for other transports.

    A broker bound beyond loopback without CURVE is reachable by anyone on the network.
    """
    if not bus.startswith("tcp://"):
        return None
    host = bus[len("tcp://") :].rpartition(":")[0]
    return bool(_LOOPBACK.match(host))
