"""The context journal: SQLite (standard library, WAL mode), one database per section host.

A thin I/O shell over the engine's state: it stores what the section actors hold, and
decides nothing. Three tables, keyed by (participant, section):

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

Writes are batched per event-loop turn: section actors ``schedule`` themselves when a
participant changed; one callback per turn lets each stage its changes (encoded there,
so nothing mutable leaves the loop), hands them to the store's writer thread as one
transaction, and publishes their views once it committed. The event loop never waits
for the disk (a WAL checkpoint's fsync takes tens of milliseconds). One transaction is
in flight at a time: changes made meanwhile wait for it and go in the next one, so under
a storm of writes each transaction carries everything since the last (group commit),
and a burst of messages read in one turn costs one transaction. So the durability rule
holds: a write acknowledged by a view is in the journal. A commit in WAL mode with
``synchronous=NORMAL`` survives the process being killed (``kill -9``); a power loss may
lose the last transactions. ``delete`` (a clear) commits at once, after every
transaction in flight and before the clear is answered.

The connection holds the database exclusively (``locking_mode=EXCLUSIVE``: no shared
memory, and a second process opening the same journal is refused, naming the file).
``PRAGMA user_version`` stores the schema version; ``MIGRATIONS`` upgrades an older
journal step by step, a newer one is refused. A corrupt, truncated or foreign file
raises ``StoreError`` naming it, or with ``on_corrupt="backup_and_start_empty"`` is
moved aside (``<file>.corrupt-<UTC time>``) and the journal starts empty, loudly.

A row that cannot be read in a journal that can (a section state or pending job that
does not decode, a transcript row of the wrong type) costs its participant's section
or transcript alone, never everyone's context: when the journal is opened it is moved,
with the rows that depend on it (a corrupt state's identities and job, the rest of the
transcript), to the ``quarantine`` table (participant, source table, section or
transcript name, the row's values as MessagePack, the reason, the time), in one
transaction; the rest loads. A transcript its owner cannot decode is moved there by
the owner (``quarantine_transcript``). ``ContextStore.quarantined`` counts the rows
moved since this opening (a restart finds them gone from the tables they were in, so it
does not count them again) and one error is logged per participant. The table is
created when first needed and never read back by xrmq (it is for an operator to
inspect), so a journal with it is still one of this schema version: an xrmq without
quarantine opens it.

The journal's files are private: the database is created 0600 before SQLite opens it
(SQLite creates the write-ahead log and the shared-memory file with the database
file's mode) and an older journal's files are made 0600 when it is opened.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import msgspec

from xrmq.actors.runtime import get_logger

from .state import PendingJob, SectionState

SCHEMA_VERSION = 3
"""The journal's schema version (``PRAGMA user_version``): 2 added the tools transcripts,
3 every writer's last acknowledged write."""

_encode = msgspec.msgpack.Encoder().encode
_decode_state = msgspec.msgpack.Decoder(SectionState).decode
_decode_job = msgspec.msgpack.Decoder(PendingJob).decode
_decode_acks = msgspec.msgpack.Decoder(tuple[tuple[str, int], ...]).decode


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
_TRANSCRIPT_TABLES = ("transcripts", "transcript_messages", "transcript_originals")


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


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _add_transcripts,
    2: _add_writer_acks,
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


_UNREADABLE = (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError)
"""What decoding a row's blob raises for a row that cannot be read."""

_QUARANTINE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS quarantine (participant TEXT NOT NULL, source TEXT NOT NULL, "
    "section TEXT NOT NULL, row BLOB NOT NULL, reason TEXT NOT NULL, "
    "quarantined_at_us INTEGER NOT NULL)"
)
_KEYS = {
    "sections": ("participant", "section"),
    "identities": ("participant", "section", "identity"),
    "jobs": ("participant", "section"),
    "transcripts": ("participant", "name"),
    "transcript_messages": ("participant", "name", "position"),
    "transcript_originals": ("participant", "name", "call_id"),
}
"""The primary key of each table whose rows can be quarantined."""
_COLUMNS = {
    "sections": ("participant", "section", "state", "ack_writer", "ack_seq", "acks"),
    "identities": ("participant", "section", "identity"),
    "jobs": ("participant", "section", "job"),
    "transcripts": ("participant", "name", "header"),
    "transcript_messages": ("participant", "name", "position", "message"),
    "transcript_originals": ("participant", "name", "call_id", "position", "original"),
}
"""The columns of those tables, in the order a quarantined row keeps them."""


class Quarantined(msgspec.Struct, frozen=True):
    """A journal row moved to the ``quarantine`` table: from ``source`` (a table), with
    its values (``row``, in ``_COLUMNS[source]`` order) and why it could not be used.
    Its ``section`` is the section's journal name, or a transcript's store name."""

    source: str
    row: tuple[object, ...]
    reason: str

    @property
    def participant(self) -> str:
        value = self.row[0]
        return value if isinstance(value, str) else repr(value)

    @property
    def section(self) -> str:
        value = self.row[1]
        return value if isinstance(value, str) else repr(value)


class InUseError(StoreError):
    """Another process holds the journal: never moved aside, whatever ``on_corrupt`` says."""


class Recovered(msgspec.Struct):
    """One section of one participant as the journal holds it."""

    state: SectionState
    acks: tuple[tuple[str, int], ...] = ()
    """The last acknowledged write of each recent writer, least recent first."""


class RecoveredTranscript(msgspec.Struct):
    """One transcript as the journal holds it: the header blob (its owner decodes it),
    the messages as blobs in order, and the originals as (call id, text), oldest first."""

    header: bytes
    messages: list[bytes]
    originals: list[tuple[str, str]]


class Journaled(Protocol):
    """A section actor's part of a commit: stage its changes; return what to publish once
    they are committed, and what to do if the commit fails (stage them again later)."""

    def stage(self, store: ContextStore) -> tuple[list[Callable[[], None]], Callable[[], None]]: ...


class ContextStore:
    """One section host's journal (see the module docstring). Use ``open_store``."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        path: Path,
        recovered: dict[tuple[str, str], Recovered],
        backup_path: Path | None,
        transcripts: dict[tuple[str, str], RecoveredTranscript] | None = None,
        quarantined: int = 0,
    ) -> None:
        self._db = connection
        self.path = path
        self.recovered = recovered
        """What the journal held when opened, by (participant, section): everything, or
        (``open_store``'s ``on_demand_prefix``) all but the sections read on demand."""
        self.transcripts = {} if transcripts is None else transcripts
        """The tools transcripts the journal held when opened, by (participant, store
        name); each is taken (popped) by the actor that restores it."""
        self.backup_path = backup_path
        """Where a corrupt journal was moved (``backup_and_start_empty``), else None."""
        self.quarantined = quarantined
        """Rows that could not be read, moved to the ``quarantine`` table since this
        opening (at it, and transcripts their owner could not decode)."""
        self._scheduled: dict[int, Journaled] = {}
        self._handle: asyncio.Handle | None = None
        self._rows: list[tuple[str, tuple]] = []
        self._barriers: list[asyncio.Future[None]] = []
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="xrmq-journal")
        self._writing = 0
        """Transactions handed to the writer and not yet committed."""
        self.commits = 0
        self.failures = 0
        self._closed = False
        self._log = get_logger(actor="context.store", path=str(path))

    # --- batching ---------------------------------------------------------------------

    def schedule(self, owner: Journaled) -> None:
        """Have ``owner`` stage its changes in this turn's commit."""
        self._scheduled[id(owner)] = owner
        self._kick()

    def _kick(self) -> None:
        """Start the next commit on the next loop turn, unless one is due or in flight."""
        if self._handle is None and not self._writing and (self._scheduled or self._barriers):
            self._handle = asyncio.get_running_loop().call_soon(self._commit_turn)

    def put(
        self,
        participant: str,
        section: str,
        state: SectionState,
        acks: dict[str, int],
        identities: Iterable[bytes],
        job: PendingJob | bool | None,
    ) -> None:
        """Stage a section's state; ``job`` True keeps the stored job, else replaces it."""
        body = msgspec.structs.replace(state, exchange_identities=set(), pending=None)
        latest = next(reversed(acks.items()), ("", 0))
        self._rows.append(
            (
                "INSERT OR REPLACE INTO sections VALUES (?, ?, ?, ?, ?, ?)",
                (participant, section, _encode(body), *latest, _encode(tuple(acks.items()))),
            )
        )
        for identity in identities:
            self._rows.append(
                (
                    "INSERT OR IGNORE INTO identities VALUES (?, ?, ?)",
                    (participant, section, identity),
                )
            )
        if job is None:
            self._rows.append(
                ("DELETE FROM jobs WHERE participant = ? AND section = ?", (participant, section))
            )
        elif job is not True:
            self._rows.append(
                (
                    "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?)",
                    (participant, section, _encode(job)),
                )
            )

    def put_transcript(
        self,
        participant: str,
        name: str,
        header: bytes,
        messages: list[bytes],
        start: int,
        originals: list[tuple[str, int, str]],
        dropped: list[str],
        *,
        reset: bool,
    ) -> None:
        """Stage a transcript's change: its ``header``, ``messages`` from position ``start``
        (``reset``: everything of it is rewritten from scratch), the ``originals`` added as
        (call id, position, text), and the call ids of originals ``dropped``."""
        key = (participant, name)
        if reset:
            self.delete_transcript(participant, name)
        else:
            self._rows.append(
                (
                    "DELETE FROM transcript_messages WHERE participant = ? AND name = ? "
                    "AND position >= ?",
                    (*key, start),
                )
            )
        self._rows.append(("INSERT OR REPLACE INTO transcripts VALUES (?, ?, ?)", (*key, header)))
        for offset, message in enumerate(messages):
            self._rows.append(
                (
                    "INSERT OR REPLACE INTO transcript_messages VALUES (?, ?, ?, ?)",
                    (*key, start + offset, message),
                )
            )
        for call_id in dropped:
            self._rows.append(
                (
                    "DELETE FROM transcript_originals WHERE participant = ? AND name = ? "
                    "AND call_id = ?",
                    (*key, call_id),
                )
            )
        for call_id, position, original in originals:
            self._rows.append(
                (
                    "INSERT OR REPLACE INTO transcript_originals VALUES (?, ?, ?, ?, ?)",
                    (*key, call_id, position, original),
                )
            )

    def delete_transcript(self, participant: str, name: str) -> None:
        """Stage the removal of a transcript (committed with this turn's transaction)."""
        for table in _TRANSCRIPT_TABLES:
            self._rows.append(
                (f"DELETE FROM {table} WHERE participant = ? AND name = ?", (participant, name))
            )

    def _commit_turn(self) -> None:
        self._handle = None
        if self._closed:
            return
        owners, self._scheduled = list(self._scheduled.values()), {}
        publish: list[Callable[[], None]] = []
        undo: list[Callable[[], None]] = []
        for owner in owners:
            sends, failed = owner.stage(self)
            publish.extend(sends)
            undo.append(failed)
        rows, self._rows = self._rows, []
        barriers, self._barriers = self._barriers, []
        loop = asyncio.get_running_loop()
        self._writing += 1
        done = asyncio.wrap_future(self._writer.submit(self._write, rows), loop=loop)
        done.add_done_callback(lambda _: self._committed(done, owners, publish, undo, barriers))

    def _committed(
        self,
        done: asyncio.Future[None],
        owners: list[Journaled],
        publish: list[Callable[[], None]],
        undo: list[Callable[[], None]],
        barriers: list[asyncio.Future[None]],
    ) -> None:
        self._writing -= 1
        error = done.exception() if not done.cancelled() else None
        if done.cancelled() or error is not None:
            self.failures += 1
            self._log.error("context.journal_write_failed", error=repr(error), retry_s=1.0)
            loop = asyncio.get_running_loop()
            for owner, failed in zip(owners, undo):  # nothing unjournaled is acknowledged
                failed()
                loop.call_later(1.0, self.schedule, owner)
            self._barriers[:0] = barriers  # resolved by the retry's commit
            return
        if not self._closed:
            for send in publish:
                send()
        for barrier in barriers:
            if not barrier.done():
                barrier.set_result(None)
        if not self._closed:
            self._kick()  # what changed while this transaction was written

    def flush(self) -> None:
        """Hand what is scheduled to the writer now, not on the next loop turn, so a read
        that follows (``read_section``) sees it (a dialogue actor the runtime retired
        with a change not yet staged, whose participant writes again)."""
        if self._closed or not self._scheduled:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._commit_turn()

    async def barrier(self) -> None:
        """Return once everything staged, scheduled or being written so far is committed."""
        if self._handle is None and not self._writing and not self._scheduled:
            return
        future = asyncio.get_running_loop().create_future()
        self._barriers.append(future)
        self._kick()
        await future

    def _run(self, call: Callable[..., object], *args: object) -> object:
        """Run ``call`` on the writer thread, after every transaction handed to it, and wait."""
        return self._writer.submit(call, *args).result()

    def _write(self, rows: list[tuple[str, tuple]]) -> None:
        if not rows:
            return
        db = self._db
        db.execute("BEGIN")
        try:
            for sql, parameters in rows:
                db.execute(sql, parameters)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.commits += 1

    def delete(self, participant: str | None, section: str) -> None:
        """Remove a participant's rows of ``section`` (every participant's for None), now."""
        where, parameters = (
            ("section = ?", (section,))
            if participant is None
            else ("participant = ? AND section = ?", (participant, section))
        )
        self._run(
            self._write,
            [
                (f"DELETE FROM {table} WHERE {where}", parameters)
                for table in ("sections", "identities", "jobs")
            ],
        )

    def delete_all(self) -> None:
        """Remove every row (a manager's ``close()``)."""
        self._rows = []
        self._run(
            self._write,
            [(f"DELETE FROM {table}", ()) for table in ("sections", "identities", "jobs")],
        )

    def read_transcript(self, participant: str, name: str) -> RecoveredTranscript | None:
        """One transcript as committed now (after every transaction handed to the writer),
        for an actor re-created after it was retired; None if the journal has none."""

        def read() -> tuple[RecoveredTranscript | None, list[Quarantined]]:
            found, bad = _read_transcripts(self._db, (participant, name))
            _quarantine(self._db, bad)
            return found.get((participant, name)), bad

        found, bad = cast(tuple[RecoveredTranscript | None, list[Quarantined]], self._run(read))
        self._quarantined(bad)
        return found

    def read_section(self, participant: str, section: str) -> Recovered | None:
        """One participant's section as committed now (after every transaction handed to
        the writer), for a section host that retired it from memory; None if the journal
        has none. A row that cannot be read is quarantined (counted, logged) and None."""

        def read() -> tuple[Recovered | None, list[Quarantined]]:
            found, bad = _read(self._db, (participant, section))
            _quarantine(self._db, bad)
            return found.get((participant, section)), bad

        found, bad = cast(tuple[Recovered | None, list[Quarantined]], self._run(read))
        self._quarantined(bad)
        return found

    def read_sections(self, section: str, participants: list[str]) -> dict[str, Recovered]:
        """``read_section`` of many participants in one go (a snapshot page), by participant;
        those the journal has no (readable) state of are left out."""

        def read() -> tuple[dict[str, Recovered], list[Quarantined]]:
            found: dict[str, Recovered] = {}
            bad: list[Quarantined] = []
            for start in range(0, len(participants), _READ_CHUNK):
                chunk = participants[start : start + _READ_CHUNK]
                some, unreadable = _read(self._db, many=(section, chunk))
                found.update((pid, item) for (pid, _), item in some.items())
                bad += unreadable
            _quarantine(self._db, bad)
            return found, bad

        found, bad = cast(tuple[dict[str, Recovered], list[Quarantined]], self._run(read))
        self._quarantined(bad)
        return found

    def section_participants(self, section: str) -> list[str]:
        """Every participant the journal holds a state of ``section`` for (committed now)."""

        def read() -> list[str]:
            rows = self._db.execute(
                "SELECT participant FROM sections WHERE section = ?", (section,)
            ).fetchall()
            return [row[0] for row in rows if isinstance(row[0], str)]

        return cast(list[str], self._run(read))

    @property
    def writing(self) -> bool:
        """Whether a transaction is being written (its rows not committed yet)."""
        return self._writing > 0

    def quarantine_transcript(self, participant: str, name: str, reason: str) -> None:
        """Move a transcript its owner cannot decode (``reason``) to the ``quarantine``
        table, now (after every transaction handed to the writer); count and log it."""

        def move() -> list[Quarantined]:
            rows = _transcript_rows(self._db, (participant, name), reason)
            _quarantine(self._db, rows)
            return rows

        self._quarantined(cast(list[Quarantined], self._run(move)))

    def _quarantined(self, rows: list[Quarantined]) -> None:
        self.quarantined += len(rows)
        _log_quarantined(self.path, rows)

    @property
    def open(self) -> bool:
        return not self._closed

    def rows(self) -> int:
        """Rows in all tables (tests, ``close()`` leaves none)."""

        def count() -> int:
            return sum(
                self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("sections", "identities", "jobs")
            )

        return int(self._run(count))  # type: ignore[call-overload]

    def total_rows(self) -> int:
        """Rows in every table of the journal, the tools transcripts' too."""

        def count() -> int:
            tables = [
                row[0]
                for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            return sum(
                self._db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
                for table in tables
            )

        return int(self._run(count))  # type: ignore[call-overload]

    def checkpoint(self) -> None:
        """Move the write-ahead log into the database file and truncate the log."""
        self._run(self._db.execute, "PRAGMA wal_checkpoint(TRUNCATE)")

    def size_bytes(self) -> int:
        """Bytes on disk: the database file and its write-ahead log."""
        return sum(
            os.path.getsize(p) for p in (self.path, Path(f"{self.path}-wal")) if os.path.exists(p)
        )

    def close(self) -> None:
        """Commit what this turn staged (a stopping process keeps it), then close."""
        if self._closed:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._scheduled:
            self._commit_turn()  # queued behind any transaction in flight
        self._closed = True
        self._run(self._db.close)  # after every transaction handed to the writer
        self._writer.shutdown(wait=True)


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
    _log_quarantined(path, quarantined)
    return ContextStore(connection, path, recovered, backup, transcripts, len(quarantined))


def _log_quarantined(path: Path, quarantined: list[Quarantined]) -> None:
    """One error per participant whose rows were quarantined: its sections, the rows, why."""
    by_participant: dict[str, list[Quarantined]] = {}
    for item in quarantined:
        by_participant.setdefault(item.participant, []).append(item)
    log = get_logger(actor="context.store", path=str(path))
    for participant, items in by_participant.items():
        log.error(
            "context.journal_rows_quarantined",
            participant=participant,
            sections=sorted({item.section for item in items}),
            rows=len(items),
            reason="; ".join(dict.fromkeys(item.reason for item in items)),
            action="moved to the journal's quarantine table; the participant's other "
            "sections and every other participant loaded",
        )


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
        recovered, quarantined = _read(connection, on_demand_prefix=on_demand_prefix)
        transcripts, unreadable = _read_transcripts(connection)
        quarantined += unreadable
        _quarantine(connection, quarantined)
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


_READ_CHUNK = 500
"""Participants per query of ``read_sections`` (within SQLite's bound on parameters)."""


def _read(
    connection: sqlite3.Connection,
    key: tuple[str, str] | None = None,
    *,
    many: tuple[str, list[str]] | None = None,
    on_demand_prefix: str | None = None,
) -> tuple[dict[tuple[str, str], Recovered], list[Quarantined]]:
    """Every section the journal holds (or the one of ``key``, (participant, section);
    or the section of each of ``many``'s participants; or all but those named
    ``on_demand_prefix...`` without a pending job), and the rows that cannot be used: a
    state or job that does not decode, an identity that is not a blob, and the
    identities and job of a section whose state does not decode."""
    recovered: dict[tuple[str, str], Recovered] = {}
    bad: list[Quarantined] = []
    broken: set[tuple[Any, Any]] = set()
    """(participant, section) whose state row is quarantined."""

    def rows(table: str) -> Iterable[tuple[Any, ...]]:
        where: str = ""
        parameters: tuple[object, ...] = ()
        if key is not None:
            where, parameters = " WHERE t.participant = ? AND t.section = ?", key
        elif many is not None:
            section, participants = many
            marks = ", ".join("?" * len(participants))
            where = f" WHERE t.section = ? AND t.participant IN ({marks})"
            parameters = (section, *participants)
        elif on_demand_prefix is not None:
            where = (
                " WHERE substr(t.section, 1, ?) != ? OR EXISTS (SELECT 1 FROM jobs AS j "
                "WHERE j.participant = t.participant AND j.section = t.section)"
            )
            parameters = (len(on_demand_prefix), on_demand_prefix)
        columns = ", ".join(f"t.{column}" for column in _COLUMNS[table])
        return connection.execute(f"SELECT {columns} FROM {table} AS t{where}", parameters)

    for row in rows("sections"):
        participant, section, blob, _, _, acks = row
        try:
            if not isinstance(participant, str) or not isinstance(section, str):
                raise TypeError("participant and section must be text")
            state = _decode_state(blob)
            recovered[(participant, section)] = Recovered(
                state,
                _decode_acks(acks) if acks else (),
            )
        except _UNREADABLE as error:
            bad.append(Quarantined("sections", row, f"corrupt section state ({error})"))
            broken.add((participant, section))
    for row in rows("identities"):
        participant, section, identity = row
        if (participant, section) in broken:
            bad.append(Quarantined("identities", row, "its section's state is corrupt"))
        elif not isinstance(identity, bytes):
            bad.append(Quarantined("identities", row, "corrupt identity (not a blob)"))
        else:
            item = recovered.get((participant, section))
            if item is not None:
                item.state.exchange_identities.add(identity)
    for row in rows("jobs"):
        participant, section, blob = row
        if (participant, section) in broken:
            bad.append(Quarantined("jobs", row, "its section's state is corrupt"))
            continue
        try:
            job = _decode_job(blob)
        except _UNREADABLE as error:
            bad.append(Quarantined("jobs", row, f"corrupt pending job ({error})"))
            continue
        item = recovered.get((participant, section))
        if item is not None:
            item.state.pending = job
    return recovered, bad


def _quarantine(connection: sqlite3.Connection, rows: list[Quarantined]) -> None:
    """Move ``rows`` to the ``quarantine`` table (created if missing), in one transaction."""
    if not rows:
        return
    now_us = time.time_ns() // 1000
    connection.execute("BEGIN")
    try:
        connection.execute(_QUARANTINE_SCHEMA)
        for item in rows:
            connection.execute(
                "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?)",
                (
                    item.participant,
                    item.source,
                    item.section,
                    _encode(item.row),
                    item.reason,
                    now_us,
                ),
            )
            key = _KEYS[item.source]
            connection.execute(
                f"DELETE FROM {item.source} WHERE "
                + " AND ".join(f"{column} IS ?" for column in key),
                item.row[: len(key)],
            )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _read_transcripts(
    connection: sqlite3.Connection, key: tuple[str, str] | None = None
) -> tuple[dict[tuple[str, str], RecoveredTranscript], list[Quarantined]]:
    """Every transcript of the journal, or the one of ``key`` (participant, name), and
    every row of the transcripts with a row of the wrong type (a blob that is text, an
    original that is not text), to quarantine: those are left out."""
    transcripts: dict[tuple[str, str], RecoveredTranscript] = {}
    bad: dict[tuple[str, str], str] = {}
    where, parameters = ("", ()) if key is None else (" WHERE participant = ? AND name = ?", key)
    for participant, name, header in connection.execute(
        "SELECT participant, name, header FROM transcripts" + where, parameters
    ):
        if isinstance(header, bytes):
            transcripts[(participant, name)] = RecoveredTranscript(header, [], [])
        else:
            bad.setdefault((participant, name), "corrupt transcript header (not a blob)")
    for participant, name, message in connection.execute(
        f"SELECT participant, name, message FROM transcript_messages{where} "
        "ORDER BY participant, name, position",
        parameters,
    ):
        item = transcripts.get((participant, name))
        if item is None:
            continue
        if isinstance(message, bytes):
            item.messages.append(message)
        else:
            bad.setdefault((participant, name), "corrupt transcript message (not a blob)")
    for participant, name, call_id, original in connection.execute(
        f"SELECT participant, name, call_id, original FROM transcript_originals{where} "
        "ORDER BY participant, name, position",
        parameters,
    ):
        item = transcripts.get((participant, name))
        if item is None:
            continue
        if isinstance(call_id, str) and isinstance(original, str):
            item.originals.append((call_id, original))
        else:
            bad.setdefault((participant, name), "corrupt transcript original (not text)")
    rows: list[Quarantined] = []
    for broken, reason in bad.items():
        transcripts.pop(broken, None)
        rows += _transcript_rows(connection, broken, reason)
    return transcripts, rows


def _transcript_rows(
    connection: sqlite3.Connection, key: tuple[str, str], reason: str
) -> list[Quarantined]:
    """Every row of the transcript ``key`` (participant, name), to quarantine for ``reason``."""
    return [
        Quarantined(table, tuple(row), reason)
        for table in _TRANSCRIPT_TABLES
        for row in connection.execute(
            f"SELECT {', '.join(_COLUMNS[table])} FROM {table} "
            "WHERE participant IS ? AND name IS ?",
            key,
        )
    ]


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
