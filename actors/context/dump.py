"""The dump format of participant context (docs/tools.md's ``dumps()``/``loads()``), pure.

``ContextManager.dump()`` returns ``encode_dump(ContextDump(...))``: MessagePack of a
versioned msgspec Struct holding, per participant and section, the rolling summary,
the verbatim entries (rendered text, time and, for exchanges, their identity) and the
exchange identities of the session. ``load()`` merges it section by section with
``Section.merge``, by exchange identity, so loading a dump twice records nothing twice.

A dump is read by this version and every later one; ``decode_dump`` rejects another
format or a newer version with a ``ValueError`` saying which.
"""

from __future__ import annotations

import msgspec

from .engine import Section
from .state import Entry, SectionState

DUMP_FORMAT = "xrmq.context.dump"
DUMP_VERSION = 1


class DumpEntry(msgspec.Struct, frozen=True):
    timestamp_us: int
    text: str
    identity: bytes = b""


class SectionDump(msgspec.Struct, frozen=True):
    """One section of one participant."""

    section: str
    kind: str
    summary: str = ""
    entries: tuple[DumpEntry, ...] = ()
    identities: tuple[bytes, ...] = ()
    """Every exchange identity of the session (dialogue), compacted ones included."""


class ParticipantDump(msgspec.Struct, frozen=True):
    participant_id: str
    sections: tuple[SectionDump, ...]


class ContextDump(msgspec.Struct, frozen=True):
    participants: tuple[ParticipantDump, ...]
    format: str = DUMP_FORMAT
    version: int = DUMP_VERSION


class _Header(msgspec.Struct):
    format: str = ""
    version: int = 0


_ENCODER = msgspec.msgpack.Encoder()


def export_section(section: Section, state: SectionState) -> SectionDump:
    """The dump of one section state (identities sorted, so equal states dump equally)."""
    entries = tuple(
        DumpEntry(entry.timestamp_us, entry.text, entry.identity) for entry in state.entries
    )
    return SectionDump(
        section.spec.name,
        section.spec.kind,
        state.summary,
        entries,
        tuple(sorted(state.exchange_identities)),
    )


def dump_entries(dump: SectionDump) -> list[Entry]:
    """The dumped entries as engine entries (ids are assigned when merged)."""
    return [
        Entry(0, entry.timestamp_us, entry.text, len(entry.text.encode()), entry.identity)
        for entry in dump.entries
    ]


def encode_dump(dump: ContextDump) -> bytes:
    return _ENCODER.encode(dump)


def decode_dump(data: bytes) -> ContextDump:
    """Decode a dump; ``ValueError`` naming what is wrong (not a dump, newer version, bad field)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError("load: data must be bytes from ContextManager.dump()")
    try:
        header = msgspec.msgpack.decode(data, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise ValueError(f"load: not an xrmq context dump ({error})") from None
    if header.format != DUMP_FORMAT:
        raise ValueError(f"load: not an xrmq context dump (format {header.format!r})")
    if header.version > DUMP_VERSION:
        raise ValueError(
            f"load: dump version {header.version} is newer than this xrmq reads ({DUMP_VERSION})"
        )
    try:
        return msgspec.msgpack.decode(data, type=ContextDump)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise ValueError(f"load: invalid context dump: {error}") from None
