"""The rows of a context journal: how they decode, and where the unreadable ones go.

``select_sections`` and ``select_transcripts`` turn the journal's rows into what the
section actors and the tools transcripts hold (``Recovered``, ``RecoveredTranscript``)
and name the rows that cannot be used (``Quarantined``); ``quarantine`` moves those to
the ``quarantine`` table. They run on the thread that holds the connection (the opening
thread, then the journal's writer), never on the event loop.

A row that cannot be read in a journal that can (a section state or pending job that
does not decode, a transcript row of the wrong type) costs its participant's section
or transcript alone, never everyone's context: it is moved, with the rows that depend
on it (a corrupt state's identities and job, the rest of the transcript), to the
``quarantine`` table (participant, source table, section or transcript name, the row's
values as MessagePack, the reason, the time), in one transaction; the rest loads. The
table is created when first needed and never read back by xrmq (it is for an operator
to inspect), so a journal with it is still one of its schema version: an xrmq without
quarantine opens it. ``log_quarantined`` logs one error per participant.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from xrmq.actors.runtime import get_logger

from .state import PendingJob, SectionState

_encode = msgspec.msgpack.Encoder().encode
_decode_state = msgspec.msgpack.Decoder(SectionState).decode
_decode_job = msgspec.msgpack.Decoder(PendingJob).decode
_decode_acks = msgspec.msgpack.Decoder(tuple[tuple[str, int], ...]).decode

TRANSCRIPT_TABLES = ("transcripts", "transcript_messages", "transcript_originals")
"""The tables of the tools transcripts, keyed by (participant, name)."""

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


READ_CHUNK = 500
"""Participants per query of ``read_sections`` (within SQLite's bound on parameters)."""


def select_sections(
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


def check_page(
    connection: sqlite3.Connection, after: tuple[Any, Any] | None, limit: int
) -> tuple[list[Quarantined], tuple[Any, Any] | None]:
    """Read the sections of up to ``limit`` (participant, section) keys after ``after`` (in
    key order; from the first with None) as ``select_sections`` does, keeping nothing:
    the rows that cannot be used, and the key to read on from (None after the last)."""
    where: str = ""
    parameters: tuple[Any, ...] = ()
    if after is not None:
        where = " WHERE participant > ? OR (participant = ? AND section > ?)"
        parameters = (after[0], after[0], after[1])
    keys = connection.execute(
        f"SELECT participant, section FROM sections{where} ORDER BY participant, section LIMIT ?",
        (*parameters, limit),
    ).fetchall()
    by_section: dict[Any, list[Any]] = {}
    for participant, section in keys:
        by_section.setdefault(section, []).append(participant)
    bad: list[Quarantined] = []
    for section, participants in by_section.items():
        for start in range(0, len(participants), READ_CHUNK):
            chunk = participants[start : start + READ_CHUNK]
            bad += select_sections(connection, many=(section, chunk))[1]
    return bad, (tuple(keys[-1]) if len(keys) == limit else None)


def quarantine(connection: sqlite3.Connection, rows: list[Quarantined]) -> None:
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


def select_transcripts(
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
        rows += transcript_rows(connection, broken, reason)
    return transcripts, rows


def transcript_rows(
    connection: sqlite3.Connection, key: tuple[str, str], reason: str
) -> list[Quarantined]:
    """Every row of the transcript ``key`` (participant, name), to quarantine for ``reason``."""
    return [
        Quarantined(table, tuple(row), reason)
        for table in TRANSCRIPT_TABLES
        for row in connection.execute(
            f"SELECT {', '.join(_COLUMNS[table])} FROM {table} "
            "WHERE participant IS ? AND name IS ?",
            key,
        )
    ]


def log_quarantined(path: Path, quarantined: list[Quarantined]) -> None:
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
