"""CURVE key pairs in ``zmq.auth``'s certificate format, and the credentials a client uses.

``NAME.key`` holds the public key, ``NAME.key_secret`` the public and the secret key
(mode 0600, in a directory of mode 0700). The file name is the identity: the broker
knows a client by the name of its public key file (or of its ``[bus.identities]`` table),
and a client's runtime names start with the stem of its secret key file.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import zmq
import zmq.auth

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
KEY_ENV = "XRMQ_KEY"
SERVER_KEY_ENV = "XRMQ_SERVER_KEY"


class KeyFileError(ValueError):
    """A key file that is missing, unreadable or not a CURVE certificate."""


class KeyInfo(msgspec.Struct, frozen=True):
    """One key pair (or public key alone) found in a directory."""

    name: str
    public_key: str
    has_secret: bool


class ClientCredentials(msgspec.Struct, frozen=True):
    """What a client socket needs to reach a CURVE broker: its key pair and the broker's key."""

    identity: str
    public_key: bytes
    secret_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # never the secret key, in a log line or a traceback
        return f"ClientCredentials(identity={self.identity!r}, public_key={self.public_key!r})"

    def apply(self, socket: zmq.Socket) -> None:
        """Make ``socket`` a CURVE client of the broker (before it connects)."""
        socket.curve_secretkey = self.secret_key
        socket.curve_publickey = self.public_key
        socket.curve_serverkey = self.server_key


def require_curve() -> None:
    if not zmq.has("curve"):
        raise RuntimeError(
            "bus.security: this libzmq has no CURVE support (zmq.has('curve') is False)"
        )


def create_keypair(name: str, directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``NAME.key`` and ``NAME.key_secret`` (mode 0600) in ``directory`` (created 0700).

    Refuses to overwrite an existing pair: a new key locks out every peer holding the old one.
    """
    require_curve()
    if not name or "/" in name or name.startswith(".") or "\x00" in name:
        raise ValueError(f"keys: name {name!r} must be a plain file name")
    folder = Path(directory)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    public, secret = folder / f"{name}{PUBLIC_SUFFIX}", folder / f"{name}{SECRET_SUFFIX}"
    if public.exists() or secret.exists():
        raise ValueError(f"keys: {public} or {secret} already exists; remove it to make a new pair")
    old = os.umask(0o077)  # the secret file is never readable by others, not even for a moment
    try:
        public_path, secret_path = zmq.auth.create_certificates(str(folder), name)
    finally:
        os.umask(old)
    os.chmod(secret_path, 0o600)
    os.chmod(public_path, 0o644)
    return Path(public_path), Path(secret_path)


def ensure_keypair(name: str, directory: str | os.PathLike[str]) -> bool:
    """Create ``name``'s pair in ``directory`` unless its secret file exists; True if created."""
    if (Path(directory) / f"{name}{SECRET_SUFFIX}").exists():
        return False
    create_keypair(name, directory)
    return True


def list_keys(directory: str | os.PathLike[str]) -> list[KeyInfo]:
    """Every public key file of ``directory``, by name, with whether its secret is there too."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ValueError(f"keys: {folder} is not a directory")
    found = []
    for path in sorted(folder.glob(f"*{PUBLIC_SUFFIX}")):
        name = path.name[: -len(PUBLIC_SUFFIX)]
        found.append(
            KeyInfo(name, load_public(path).decode(), (folder / f"{name}{SECRET_SUFFIX}").exists())
        )
    return found


def load_public(key: str | os.PathLike[str] | bytes) -> bytes:
    """A Z85 public key: given as the 40-character text itself, or a certificate file's path."""
    if isinstance(key, bytes):
        text = key
    elif isinstance(key, str) and len(key) == 40 and not os.path.exists(key):
        text = key.encode()
    else:
        try:
            text, _ = zmq.auth.load_certificate(str(key))
        except (OSError, ValueError) as error:
            raise KeyFileError(f"key {key}: not a CURVE certificate: {error}") from None
    if len(text) != 40:
        raise KeyFileError(f"key {key!r}: a Z85 public key has 40 characters")
    return text


def load_secret(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file; refuses one that others can read."""
    try:
        mode = os.stat(path).st_mode
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as error:
        raise KeyFileError(f"key {path}: not a CURVE certificate: {error}") from None
    if secret is None:
        raise KeyFileError(f"key {path}: has no secret key (give the NAME.key_secret file)")
    if mode & 0o077:
        raise KeyFileError(f"key {path}: must not be readable by other users (chmod 600)")
    return public, secret


def identity_of(path: str | os.PathLike[str]) -> str:
    """The identity a key file stands for: its name without ``.key``/``.key_secret``."""
    name = Path(path).name
    for suffix in (SECRET_SUFFIX, PUBLIC_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def client_credentials(
    key: str | os.PathLike[str] | None = None,
    server_key: str | os.PathLike[str] | bytes | None = None,
) -> ClientCredentials | None:
    """The credentials of ``key``/``server_key``, else of ``$XRMQ_KEY``/``$XRMQ_SERVER_KEY``.

    None when neither names a key (a plain bus). A key without the broker's key (or the
    reverse) is an error naming both.
    """
    key = key if key is not None else os.environ.get(KEY_ENV) or None
    server_key = server_key if server_key is not None else os.environ.get(SERVER_KEY_ENV) or None
    if key is None and server_key is None:
        return None
    if key is None or server_key is None:
        raise ValueError(
            f"--key ({KEY_ENV}) and --server-key ({SERVER_KEY_ENV}): give both or neither"
        )
    require_curve()
    public, secret = load_secret(key)
    return ClientCredentials(identity_of(key), public, secret, load_public(server_key))
