"""The journal of one section host: ``ContextStore``, a thin I/O shell over SQLite.

It stores what the section actors hold and decides nothing (``store.open_store`` opens
one; the tables are described there). Every statement runs on one writer thread, so
the event loop never waits for the disk (a WAL checkpoint's fsync takes tens of
milliseconds).

Writes are batched per event-loop turn: section actors ``schedule`` themselves when a
participant changed; one callback per turn lets each stage its changes (encoded there,
so nothing mutable leaves the loop), hands them to the writer thread as one
transaction, and publishes their views once it committed. One transaction is in flight
at a time: changes made meanwhile wait for it and go in the next one, so under a storm
of writes each transaction carries everything since the last (group commit), and a
burst of messages read in one turn costs one transaction. So the durability rule
holds: a write acknowledged by a view is in the journal. A commit in WAL mode with
``synchronous=NORMAL`` survives the process being killed (``kill -9``); a power loss may
lose the last transactions. ``delete`` (a clear) commits at once, after every
transaction in flight and before the clear is answered.

Point reads (``read_section``, ``read_sections``, ``read_transcript``) run on the writer
thread too, after every transaction handed to it, and quarantine the rows they cannot
read (``journal_rows``). The names sections have in the journal are here as well
(``journal_name``, ``TOPIC_JOURNAL_PREFIX``): every process that reads a journal must
agree on them.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, cast

import msgspec

from xrmq.actors.runtime import get_logger

from .engine import Section
from .journal_rows import (
    READ_CHUNK,
    TRANSCRIPT_TABLES,
    Quarantined,
    Recovered,
    RecoveredTranscript,
    check_page,
    log_quarantined,
    quarantine,
    select_sections,
    select_transcripts,
    transcript_rows,
)
from .state import PendingJob, SectionState

_encode = msgspec.msgpack.Encoder().encode

TOPIC_JOURNAL_PREFIX = "topic:"
"""What every topic section's journal name starts with (``open_store(...,
on_demand_prefix=TOPIC_JOURNAL_PREFIX)`` reads the topic sections when first used)."""
ON_DEMAND_ALL = ""
"""The ``on_demand_prefix`` of every section: a context process opens its journal with it,
so a restart reads only the participants' ids and the sections with a pending job."""


def journal_name(section: Section) -> str:
    """A section's name in the journal: ``dialogue``, or ``topic:<name>`` (a topic may
    itself be called "dialogue")."""
    return (
        "dialogue"
        if section.spec.kind == "dialogue"
        else f"{TOPIC_JOURNAL_PREFIX}{section.spec.name}"
    )


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
        for table in TRANSCRIPT_TABLES:
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

    def delete_many(self, participants: list[str], section: str) -> None:
        """``delete`` of many participants' rows of ``section``, in one transaction, now."""
        self._run(
            self._write,
            [
                (f"DELETE FROM {table} WHERE participant = ? AND section = ?", (pid, section))
                for pid in participants
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
            found, bad = select_transcripts(self._db, (participant, name))
            quarantine(self._db, bad)
            return found.get((participant, name)), bad

        found, bad = cast(tuple[RecoveredTranscript | None, list[Quarantined]], self._run(read))
        self._quarantined(bad)
        return found

    def read_section(self, participant: str, section: str) -> Recovered | None:
        """One participant's section as committed now (after every transaction handed to
        the writer), for a section host that retired it from memory; None if the journal
        has none. A row that cannot be read is quarantined (counted, logged) and None."""

        def read() -> tuple[Recovered | None, list[Quarantined]]:
            found, bad = select_sections(self._db, (participant, section))
            quarantine(self._db, bad)
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
            for start in range(0, len(participants), READ_CHUNK):
                chunk = participants[start : start + READ_CHUNK]
                some, unreadable = select_sections(self._db, many=(section, chunk))
                found.update((pid, item) for (pid, _), item in some.items())
                bad += unreadable
            quarantine(self._db, bad)
            return found, bad

        found, bad = cast(tuple[dict[str, Recovered], list[Quarantined]], self._run(read))
        self._quarantined(bad)
        return found

    async def check(self, after: tuple[Any, Any] | None, limit: int) -> tuple[Any, Any] | None:
        """Read the next ``limit`` sections after the key ``after`` (None: from the first)
        without keeping them, on the writer thread while the loop goes on, and quarantine
        the rows that cannot be read (counted, logged): a journal opened with sections
        read on demand is checked whole this way in the background. The key to go on
        from, None after the last."""

        def read() -> tuple[list[Quarantined], tuple[Any, Any] | None]:
            bad, last = check_page(self._db, after, limit)
            quarantine(self._db, bad)
            return bad, last

        bad, last = await asyncio.wrap_future(self._writer.submit(read))
        self._quarantined(bad)
        return last

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
            rows = transcript_rows(self._db, (participant, name), reason)
            quarantine(self._db, rows)
            return rows

        self._quarantined(cast(list[Quarantined], self._run(move)))

    def _quarantined(self, rows: list[Quarantined]) -> None:
        self.quarantined += len(rows)
        log_quarantined(self.path, rows)

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
