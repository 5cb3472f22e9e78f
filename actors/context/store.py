"""Opening a context journal: SQLite (standard library, WAL mode), one database per section host.

``open_store`` creates or opens the file, checks and upgrades its schema, reads what it
holds and returns the ``journal.ContextStore`` the section actors write through. Three
tables hold the sections, keyed by (participant, section):

- ``sections``: the ``SectionState`` (MessagePack, without identities and pending job),
  the latest acknowledged manager write (writer, seq) and the last acknowledged write of
  each recent writer (``acks``: MessagePack (writer, seq) pairs), so a write re-sent
  after a restart is applied once whichever other manager wrote in between;
- ``identities``: the exchange identities of the session, one row each (append-only,
  so a write costs its new identities, not the whole set);
- ``jobs``: the pending compaction job, re-issued after a restart.

And, for each tools destination's transcripts (``xrmq.actors.tools.store``), keyed by
(participant, store name): ``transcripts`` (summary, token count, docs/tools.md's counters
and the write revision, as one opaque blob), ``transcript_messages`` (one row per
message, appended as turns commit, rewritten after a compaction) and
``transcript_originals`` (the reclaimed originals ``extract_compacted_tool_result``
returns, oldest first).

The connection holds the database exclusively (``locking_mode=EXCLUSIVE``: no shared
memory, and a second process opening the same journal is refused, naming the file).
``PRAGMA user_version`` stores the schema version; ``MIGRATIONS`` upgrades an older
journal step by step, a newer one is refused. A corrupt, truncated or foreign file
raises ``StoreError`` naming it, or with ``on_corrupt="backup_and_start_empty"`` is
moved aside (``<file>.corrupt-<UTC time>``) and the journal starts empty, loudly. Rows
that cannot be read in a journal that can are quarantined at opening
(``journal_rows``), so they cost their participant's section alone;
``ContextStore.quarantined`` counts them (a restart finds them gone from the tables they
were in, so it does not count them again).

The journal's files are private: the database is created 0600 before SQLite opens it
(SQLite creates the write-ahead log and the shared-memory file with the database
file's mode) and an older journal's files are made 0600 when it is opened.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from xrmq.actors.runtime import get_logger

from .journal import ContextStore
from .journal_rows import (
    Quarantined,
    Recovered,
    RecoveredTranscript,
    log_quarantined,
    quarantine,
    select_sections,
    select_transcripts,
)

SCHEMA_VERSION = 4
"""The journal's schema version (``PRAGMA user_version``): 2 added the tools transcripts,
3 every writer's last acknowledged write, 4 transcript messages as OpenAI's typed chat
messages."""


_encode = msgspec.msgpack.Encoder().encode
_decode_any = msgspec.msgpack.Decoder().decode


_TRANSCRIPT_SCHEMA = (
    "CREATE TABLE transcripts (participant TEXT NOT NULL, name TEXT NOT NULL, "
    "header BLOB NOT NULL, PRIMARY KEY (participant, name)) WITHOUT ROWID",
    "CREATE TABLE transcript_messages (participant TEXT NOT NULL, name TEXT NOT NULL, "
    "position INTEGER NOT NULL, message BLOB NOT NULL, "
    "PRIMARY KEY (participant, name, position)) WITHOUT ROWID",
    "CREATE TABLE transcript_originals (participant TEXT NOT NULL, name TEXT NOT NULL, "
    "call_id TEXT NOT NULL, position INTEGER NOT NULL, original TEXT NOT NULL, "
    "PRIMARY KEY (participant, name, call_id)) WITHOUT ROWID",
)


def _add_writer_acks(db: sqlite3.Connection) -> None:
    """Version 2 -> 3: every writer's last acknowledged write (``sections.acks``); the one
    write an older journal knew (``ack_writer``, ``ack_seq``) becomes the only entry."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(sections)")}
    if "acks" not in columns:
        db.execute("ALTER TABLE sections ADD COLUMN acks BLOB NOT NULL DEFAULT x''")
    rows = db.execute("SELECT participant, section, ack_writer, ack_seq FROM sections").fetchall()
    for participant, section, writer, seq in rows:
        acks = ((writer, seq),) if writer else ()
        db.execute(
            "UPDATE sections SET acks = ? WHERE participant = ? AND section = ?",
            (_encode(acks), participant, section),
        )


def _add_transcripts(connection: sqlite3.Connection) -> None:
    """Version 1 -> 2: the tables of the tools transcripts."""
    for statement in _TRANSCRIPT_SCHEMA:
        connection.execute(statement)


def _openai_transcript_messages(db: sqlite3.Connection) -> None:
    """Version 3 -> 4: each transcript message row holds OpenAI's typed chat message
    (``{"role", "content", "tool_calls": [{"id", "type": "function", "function": {"name",
    "arguments"}}], "tool_call_id", "reasoning_content"}``) instead of the models'
    ``ChatMessage`` struct (tool calls ``{"id", "name", "arguments"}``, ``reasoning``). A row
    that is not an old message is left as it is, for the transcript's reader to quarantine."""
    rows = db.execute(
        "SELECT participant, name, position, message FROM transcript_messages"
    ).fetchall()
    for participant, name, position, blob in rows:
        try:
            message = _openai_message(_decode_any(blob))
        except (msgspec.DecodeError, TypeError, KeyError):
            continue
        if message is not None:
            db.execute(
                "UPDATE transcript_messages SET message = ? "
                "WHERE participant = ? AND name = ? AND position = ?",
                (_encode(message), participant, name, position),
            )


def _openai_message(old: Any) -> dict[str, Any] | None:
    """An old journal's ``ChatMessage`` (decoded as a map) as OpenAI's typed chat message."""
    if not isinstance(old, dict) or not isinstance(old.get("role"), str):
        return None
    message: dict[str, Any] = {"role": old["role"], "content": old.get("content")}
    calls = old.get("tool_calls") or []
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call.get("arguments", "{}")},
            }
            for call in calls
        ]
    if old.get("tool_call_id") is not None:
        message["tool_call_id"] = old["tool_call_id"]
    if old.get("reasoning") is not None:
        message["reasoning_content"] = old["reasoning"]
    return message


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _add_transcripts,
    2: _add_writer_acks,
    3: _openai_transcript_messages,
}
"""``MIGRATIONS[v]`` upgrades a journal at version ``v`` to ``v + 1`` (a change of the
tables adds a step here and bumps ``SCHEMA_VERSION``)."""

OnCorrupt = Literal["error", "backup_and_start_empty"]
ON_CORRUPT: tuple[str, ...] = ("error", "backup_and_start_empty")

_SCHEMA = (
    "CREATE TABLE sections (participant TEXT NOT NULL, section TEXT NOT NULL, "
    "state BLOB NOT NULL, ack_writer TEXT NOT NULL, ack_seq INTEGER NOT NULL, "
    "acks BLOB NOT NULL DEFAULT x'', PRIMARY KEY (participant, section)) WITHOUT ROWID",
    "CREATE TABLE identities (participant TEXT NOT NULL, section TEXT NOT NULL, "
    "identity BLOB NOT NULL, PRIMARY KEY (participant, section, identity)) WITHOUT ROWID",
    "CREATE TABLE jobs (participant TEXT NOT NULL, section TEXT NOT NULL, job BLOB NOT NULL, "
    "PRIMARY KEY (participant, section)) WITHOUT ROWID",
    *_TRANSCRIPT_SCHEMA,
)


class StoreError(RuntimeError):
    """The journal at ``path`` cannot be used: corrupt, truncated, foreign or of another version."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(
            f"context journal {path}: {problem}; move the file aside, or set [context] "
            f'on_corrupt = "backup_and_start_empty" to do so and start empty'
        )


class InUseError(StoreError):
    """Another process holds the journal: never moved aside, whatever ``on_corrupt`` says."""


# ---------------------------------------------------------------------------- opening


def open_store(
    path: str | os.PathLike[str],
    *,
    on_corrupt: OnCorrupt = "error",
    on_demand_prefix: str | None = None,
) -> ContextStore:
    """Open (creating it and its directory) the journal at ``path`` and read it whole.

    With ``on_demand_prefix``, the sections whose journal name starts with it are not
    read at opening (so a restart's time does not grow with their participants), except
    those with a pending compaction job (re-issued at start): their owner reads each when
    first used (``read_section``), and a row of theirs that cannot be read is quarantined
    then.

    Raises ``StoreError`` naming the file for a corrupt, truncated or foreign database
    or one of a newer schema; with ``on_corrupt="backup_and_start_empty"`` the file is
    moved aside and an empty journal is started, with an error logged.
    """
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(
            f"on_corrupt: must be one of {', '.join(map(repr, ON_CORRUPT))}, got {on_corrupt!r}"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    backup = None
    try:
        connection, recovered, transcripts, quarantined = _open(path, on_demand_prefix)
    except StoreError as error:
        if on_corrupt == "error" or isinstance(error, InUseError):
            raise
        backup = _move_aside(path)
        get_logger(actor="context.store", path=str(path)).error(
            "context.journal_corrupt",
            problem=error.problem,
            backup=str(backup),
            action="moved aside; starting with an empty journal",
        )
        connection, recovered, transcripts, quarantined = _open(path, on_demand_prefix)
    log_quarantined(path, quarantined)
    return ContextStore(connection, path, recovered, backup, transcripts, len(quarantined))


def _make_private(path: Path) -> None:
    """Create the journal 0600 if it is missing, and make it and its ``-wal``/``-shm``
    0600 if they exist (an older xrmq left them 0644): SQLite creates the write-ahead
    log (and the shared-memory file) with the database file's mode, so no file of the
    journal is ever readable by another user, whatever the process's umask."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        for suffix in ("", "-wal", "-shm"):
            try:
                os.chmod(f"{path}{suffix}", 0o600)
            except FileNotFoundError:
                pass
    except OSError as error:
        raise ValueError(
            f"context journal {path}: cannot make it and its -wal/-shm files mode 0600 "
            f"({error}); the journal must be owned by the user running xrmq"
        ) from None


def _open(
    path: Path, on_demand_prefix: str | None = None
) -> tuple[
    sqlite3.Connection,
    dict[tuple[str, str], Recovered],
    dict[tuple[str, str], RecoveredTranscript],
    list[Quarantined],
]:
    _make_private(path)
    try:
        # One thread uses it at a time: this one to open and read, then the writer thread.
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as error:
        raise StoreError(path, f"cannot open ({error})") from None
    try:
        # before any access: WAL without shared memory
        connection.execute("PRAGMA locking_mode=EXCLUSIVE")
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA journal_size_limit=4194304")
        tables = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if version == 0 and not tables:
            connection.execute("BEGIN")
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            connection.execute("COMMIT")
        else:
            version = migrate(connection, path, version)
            # a write: the exclusive lock, now
            connection.execute(f"PRAGMA user_version = {version}")
        check = connection.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise StoreError(path, f"corrupt database ({check})")
        recovered, quarantined = select_sections(connection, on_demand_prefix=on_demand_prefix)
        transcripts, unreadable = select_transcripts(connection)
        quarantined += unreadable
        quarantine(connection, quarantined)
        return connection, recovered, transcripts, quarantined
    except sqlite3.OperationalError as error:
        connection.close()
        if "locked" in str(error):
            raise InUseError(
                path, "in use by another process (each context process has its own journal)"
            ) from None
        raise StoreError(path, f"cannot read ({error})") from None
    except sqlite3.DatabaseError as error:
        connection.close()
        raise StoreError(path, f"corrupt or not a context journal ({error})") from None
    except StoreError:
        connection.close()
        raise


def migrate(connection: sqlite3.Connection, path: Path, version: int) -> int:
    """Upgrade a journal from ``version`` to ``SCHEMA_VERSION`` through ``MIGRATIONS``."""
    if version > SCHEMA_VERSION:
        raise StoreError(
            path, f"written by schema version {version}; this xrmq reads up to {SCHEMA_VERSION}"
        )
    if version < 1:
        raise StoreError(path, f"not a context journal (schema version {version})")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise StoreError(path, f"no migration from schema version {version}")
        connection.execute("BEGIN")
        step(connection)
        version += 1
        connection.execute(f"PRAGMA user_version = {version}")
        connection.execute("COMMIT")
    return version


def _move_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{backup}{suffix}")
    return backup


def orphan_journals(directory: str | os.PathLike[str], namespace: str, shards: int) -> list[Path]:
    """The journals ``<namespace>-<i>.sqlite3`` in ``directory`` of shards ``i >= shards``
    (left by a larger shard count), for shard 0 to migrate."""
    found = []
    for path in Path(directory).glob(f"{namespace}-*.sqlite3"):
        suffix = path.name[len(namespace) + 1 : -len(".sqlite3")]
        if suffix.isdigit() and int(suffix) >= shards:
            found.append(path)
    return sorted(found, key=lambda path: int(path.name[len(namespace) + 1 : -len(".sqlite3")]))
