"""Seeded long sessions for the compaction eval: pure data, no model, no clock.

A session is, per participant, a time-ordered list of events on three sections: the
dialogue (exchanges), an incremental topic (``notes``: sensor readings and notes) and a
summary topic (``scene``: its latest state replaces the previous one). Among filler
events it plants facts whose exact value a later probe asks for:

- ``number``, ``name``, ``time``, ``identifier``: stated once by the participant;
- ``correction``: stated, then superseded by a later exchange ("Actually, ...");
- ``sensor``: a reading on the incremental topic, superseded by later readings;
- ``cross_section``: stated in the dialogue, then superseded by a newer topic update
  (docs/context.md, "Prompt layout": a dialogue summary can span a time range that overlaps a
  newer update of another section, and only the times show which fact is newer);
- ``scene``: a summary-topic state (never compacted; it is never probed, since it never
  lives solely in a summary, but it adds the layout's third kind of block).

Some exchanges and updates are oversized (larger than one compaction request), each
with a fact at its start (an extra ``number`` fact where no other was planned), so the clipping rule
(start and end kept) is exercised too.

Everything comes from ``random.Random(seed)``: one seed gives the same session, byte for
byte, whatever model later runs it (the assistant's replies in the dialogue are
templates, not model output).
"""

from __future__ import annotations

import random
from typing import Literal

import msgspec

FactKind = Literal["number", "name", "time", "identifier", "correction", "sensor", "cross_section"]
FACT_KINDS: tuple[FactKind, ...] = (
    "number",
    "name",
    "time",
    "identifier",
    "correction",
    "sensor",
    "cross_section",
)
SectionName = Literal["dialogue", "notes", "scene"]

SESSION_START_US = 1_796_126_400_000_000
"""2026-12-01 09:00 UTC: every session's clock starts here, so sessions are reproducible."""


class Statement(msgspec.Struct, frozen=True):
    """One planted statement of a fact: where it was written and the value it stated."""

    event_index: int
    """Index of the event (in its participant's list) that carries the statement."""
    value: str


class Fact(msgspec.Struct, frozen=True):
    """A planted fact and its probe. The last statement's value is the current one."""

    fact_id: str
    participant_id: str
    kind: FactKind
    question: str
    statements: tuple[Statement, ...]
    oversized: bool = False
    """The first statement opens an exchange or update larger than one compaction request."""

    @property
    def value(self) -> str:
        """The current value: the latest statement's."""
        return self.statements[-1].value

    @property
    def superseded(self) -> tuple[str, ...]:
        """Earlier values that a later statement replaced (never equal to the current)."""
        return tuple(s.value for s in self.statements[:-1] if s.value != self.value)


class Event(msgspec.Struct, frozen=True):
    """One write: an exchange (``request``/``answer``) or a topic update (``text``)."""

    section: SectionName
    timestamp_us: int
    text: str = ""
    request: str = ""
    answer: str = ""


class SessionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Size of a session. Budgets are small so every section compacts many times."""

    participants: int = 6
    exchanges: int = 260
    """Dialogue exchanges per participant (facts plus filler)."""
    facts_per_kind: int = 4
    dialogue_budget_bytes: int = 2400
    notes_budget_bytes: int = 2000
    scene_budget_bytes: int = 500
    compaction_input_budget_bytes: int = 1600
    notes_per_exchange: float = 1.2
    """Expected incremental-topic updates per exchange. Sensors stop re-reading after
    three quarters of the session, so their last readings are summarized by the end."""
    scene_every: int = 25
    """A summary-topic state every this many exchanges."""
    oversized_every: int = 60
    """Every this many exchanges one is oversized (0: none)."""
    probe_points: int = 3
    """Probes are asked at the end of each of this many equal parts of the session."""

    def __post_init__(self) -> None:
        for field in (
            "participants",
            "exchanges",
            "facts_per_kind",
            "dialogue_budget_bytes",
            "notes_budget_bytes",
            "scene_budget_bytes",
            "compaction_input_budget_bytes",
            "scene_every",
            "probe_points",
        ):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SessionConfig.{field}: must be a positive integer")
        if not 0 <= self.notes_per_exchange <= 5:
            raise ValueError("SessionConfig.notes_per_exchange: must be between 0 and 5")


QUICK_CONFIG = SessionConfig(participants=2, exchanges=170, facts_per_kind=2)
"""CI size: seconds on the offline model, still at least 10 compactions per section."""


class Session(msgspec.Struct, frozen=True):
    """A whole eval session: every participant's events and planted facts."""

    seed: int
    config: SessionConfig
    events: dict[str, tuple[Event, ...]]
    facts: tuple[Fact, ...]


# --- vocabulary ---------------------------------------------------------------------

_FIRST = (
    "Dana",
    "Ravi",
    "Mei",
    "Tomasz",
    "Ingrid",
    "Kofi",
    "Lucia",
    "Hiro",
    "Amara",
    "Sven",
    "Noor",
    "Mateo",
    "Yuki",
    "Farah",
    "Olek",
    "Priya",
)
_LAST = (
    "Whitfield",
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Petrova",
    "Haddad",
    "Brennan",
    "Castillo",
    "Novak",
    "Achebe",
    "Sorensen",
)
_NUMBER_SUBJECTS = (
    "badge number",
    "locker number",
    "desk extension",
    "parking spot",
    "bike lock code",
    "shoe size order",
    "seat number",
    "pallet count",
)
_NAME_SUBJECTS = (
    "manager",
    "dentist",
    "landlord",
    "mentor",
    "electrician",
    "neighbour",
    "safety officer",
    "tutor",
)
_TIME_SUBJECTS = (
    "dentist appointment",
    "team standup",
    "train to Lyon",
    "delivery slot",
    "yoga class",
    "school pickup",
    "boiler service",
    "video call with Osaka",
)
_ID_SUBJECTS = (
    "support ticket",
    "parcel tracking code",
    "invoice",
    "work order",
    "license key",
    "booking reference",
    "asset tag",
    "flight",
)
_CORRECTION_SUBJECTS = (
    "quarterly review",
    "fire drill",
    "book club",
    "vendor demo",
    "budget meeting",
    "board game night",
    "safety briefing",
    "lab tour",
)
_SENSOR_DEVICES = (
    "freezer 3",
    "greenhouse humidity probe",
    "server rack B thermometer",
    "water tank level gauge",
    "cold room 2",
    "kiln",
    "battery bank",
    "aquarium",
)
_CROSS_OBJECTS = (
    "forklift",
    "spare projector",
    "first aid kit",
    "tripod",
    "label printer",
    "cargo van",
    "loaner laptop",
    "oscilloscope",
)
_FILLER_REQUESTS = (
    "Can you remind me to stretch later?",
    "What a long day it has been.",
    "I think I will grab a coffee soon.",
    "The weather looks grey outside.",
    "Let me check my email first.",
    "I need to tidy this desk at some point.",
    "That podcast episode was quite good.",
    "I might go for a walk after lunch.",
    "The printer is making that noise again.",
    "Remind me to water the plants.",
)
_FILLER_ANSWERS = (
    "Sure, I will keep that in mind.",
    "Understood.",
    "Sounds good.",
    "Okay, noted.",
    "Happy to help with that.",
    "Alright.",
)
_NOTE_FILLER = (
    "Motion detected near the east door.",
    "Lights in corridor 2 switched off.",
    "Door to the storage room closed.",
    "Ambient noise level normal.",
    "Visitor badge scanned at reception.",
    "Ventilation running at normal speed.",
)
_SCENE_ITEMS = (
    "a red toolbox",
    "two monitors",
    "a coffee mug",
    "a soldering iron",
    "a stack of invoices",
    "a potted fern",
    "safety goggles",
    "a laptop",
)
_UNITS = {
    "freezer 3": "C",
    "greenhouse humidity probe": "%",
    "server rack B thermometer": "C",
    "water tank level gauge": "cm",
    "cold room 2": "C",
    "kiln": "C",
    "battery bank": "V",
    "aquarium": "C",
}
_OVERSIZE_LINE = (
    "Log line {i:03d}: routine status check passed, queue depth nominal, "
    "no action required by the operator at this time."
)


def _identifier(rng: random.Random) -> str:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2))
    return f"{letters}-{rng.randint(1000, 9999)}-{rng.choice('KMQX')}{rng.randint(1, 9)}"


def _clock(rng: random.Random, hour_range: tuple[int, int] = (7, 21)) -> str:
    return f"{rng.randint(*hour_range):02d}:{rng.choice((0, 10, 15, 20, 30, 40, 45, 50)):02d}"


def _reading(rng: random.Random, device: str) -> str:
    """A reading's number (one decimal or more, so it cannot be mistaken for a count)."""
    unit = _UNITS[device]
    if unit == "C":
        return f"{rng.uniform(-25, 90):.1f}"
    if unit == "%":
        return f"{rng.uniform(20, 95):.1f}"
    if unit == "V":
        return f"{rng.uniform(11, 14):.2f}"
    return f"{rng.uniform(40, 300):.1f}"


def _distinct(rng: random.Random, make: object, avoid: set[str]) -> str:
    """A value from ``make(rng)`` not in ``avoid`` (values must never collide: the scorer
    looks for exact values)."""
    assert callable(make)
    while True:
        value = str(make(rng))
        if value not in avoid:
            avoid.add(value)
            return value


class _Builder:
    """Builds one participant's events; facts are planted at chosen exchange slots."""

    def __init__(self, rng: random.Random, participant_id: str, config: SessionConfig) -> None:
        self.rng = rng
        self.pid = participant_id
        self.config = config
        self.events: list[Event] = []
        self.facts: list[Fact] = []
        self.now_us = SESSION_START_US
        self.used: set[str] = set()

    def _tick(self) -> int:
        self.now_us += self.rng.randint(20, 90) * 1_000_000
        return self.now_us

    def exchange(self, request: str, answer: str) -> int:
        self.events.append(Event("dialogue", self._tick(), request=request, answer=answer))
        return len(self.events) - 1

    def update(self, section: SectionName, text: str) -> int:
        self.events.append(Event(section, self._tick(), text=text))
        return len(self.events) - 1

    def oversized(self, head: str) -> str:
        room = self.config.compaction_input_budget_bytes + 400
        lines = [head]
        i = 0
        while sum(len(line) + 1 for line in lines) < room:
            i += 1
            lines.append(_OVERSIZE_LINE.format(i=i))
        return "\n".join(lines)

    def fact(
        self, kind: FactKind, question: str, statements: list[Statement], oversized: bool = False
    ) -> None:
        fact_id = f"{self.pid}.{kind}.{len(self.facts)}"
        self.facts.append(Fact(fact_id, self.pid, kind, question, tuple(statements), oversized))


class _FollowUp(msgspec.Struct):
    """The statement that supersedes a correction's or a cross-section fact's value."""

    kind: Literal["correction", "cross_section"]
    subject: str
    value: str
    statements: list[Statement]


def _supersede(b: _Builder, follow_up: _FollowUp) -> None:
    """Write the superseding statement (a dialogue correction, or a newer topic update
    for a fact first stated in the dialogue) and plant the fact."""
    name, value, statements = follow_up.subject, follow_up.value, follow_up.statements
    if follow_up.kind == "correction":
        index = b.exchange(f"Actually, the {name} moved to room {value}.", "Thanks, updated.")
        statements.append(Statement(index, value))
        b.fact("correction", f"Which room is the {name} in?", statements)
    else:
        index = b.update("notes", f"The {name} was moved to {value}.")
        statements.append(Statement(index, value))
        b.fact("cross_section", f"Where is the {name}?", statements)


def _plant_plan(rng: random.Random, config: SessionConfig) -> dict[int, FactKind]:
    """Which exchange slots open a fact. Facts sit in the first two thirds of the
    session, so by the end every one has been through several summaries."""
    kinds = [kind for kind in FACT_KINDS for _ in range(config.facts_per_kind)]
    slots = rng.sample(range(2, max(len(kinds) + 3, config.exchanges * 2 // 3)), len(kinds))
    return dict(zip(sorted(slots), rng.sample(kinds, len(kinds)), strict=True))


def _participant(rng: random.Random, pid: str, config: SessionConfig) -> _Builder:
    b = _Builder(rng, pid, config)
    plan = _plant_plan(rng, config)
    subjects: dict[str, list[str]] = {
        "number": list(_NUMBER_SUBJECTS),
        "name": list(_NAME_SUBJECTS),
        "time": list(_TIME_SUBJECTS),
        "identifier": list(_ID_SUBJECTS),
        "correction": list(_CORRECTION_SUBJECTS),
        "sensor": list(_SENSOR_DEVICES),
        "cross_section": list(_CROSS_OBJECTS),
    }
    for names in subjects.values():
        rng.shuffle(names)
    # Follow-ups: (exchange slot, callback) for corrections and cross-section updates.
    later: dict[int, list[_FollowUp]] = {}
    sensors: list[tuple[str, list[Statement], bool]] = []
    for slot in range(config.exchanges):
        kind = plan.get(slot)
        oversize = (
            bool(config.oversized_every)
            and slot % config.oversized_every == config.oversized_every // 2
        )
        if oversize and kind is None and subjects["number"]:
            kind = "number"  # an oversized exchange always opens with a fact
        if kind == "number":
            subject = subjects["number"].pop()
            value = _distinct(rng, lambda r: r.randint(1000, 9999), b.used)
            request = f"My {subject} is {value}."
            if oversize:
                request = b.oversized(request)
            index = b.exchange(request, "Noted.")
            b.fact("number", f"What is my {subject}?", [Statement(index, value)], oversize)
            oversize = False
        elif kind == "name":
            subject = subjects["name"].pop()
            value = _distinct(rng, lambda r: f"{r.choice(_FIRST)} {r.choice(_LAST)}", b.used)
            index = b.exchange(f"My {subject} is called {value}.", "Got it.")
            b.fact("name", f"What is the name of my {subject}?", [Statement(index, value)])
        elif kind == "time":
            subject = subjects["time"].pop()
            value = _distinct(rng, _clock, b.used)
            index = b.exchange(f"My {subject} is at {value} today.", "Okay.")
            b.fact("time", f"What time is my {subject}?", [Statement(index, value)])
        elif kind == "identifier":
            subject = subjects["identifier"].pop()
            value = _distinct(rng, _identifier, b.used)
            index = b.exchange(f"The {subject} is {value}.", "Noted.")
            b.fact("identifier", f"What is the {subject}?", [Statement(index, value)])
        elif kind == "correction":
            subject = subjects["correction"].pop()
            first = _distinct(rng, lambda r: str(r.randint(100, 899)), b.used)
            second = _distinct(rng, lambda r: str(r.randint(100, 899)), b.used)
            index = b.exchange(f"The {subject} is in room {first}.", "Noted.")
            statements = [Statement(index, first)]
            at = slot + rng.randint(8, 30)
            later.setdefault(at, []).append(_FollowUp("correction", subject, second, statements))
        elif kind == "sensor":
            device = subjects["sensor"].pop()
            statements = []
            sensors.append((device, statements, oversize))
            value = _distinct(rng, lambda r, d=device: _reading(r, d), b.used)
            text = f"{device.capitalize()} reads {value} {_UNITS[device]}."
            if oversize:
                text = b.oversized(text)
            statements.append(Statement(b.update("notes", text), value))
            oversize = False
        elif kind == "cross_section":
            thing = subjects["cross_section"].pop()
            first = _distinct(rng, lambda r: f"bay {r.randint(10, 99)}", b.used)
            second = _distinct(rng, lambda r: f"bay {r.randint(10, 99)}", b.used)
            index = b.exchange(f"I parked the {thing} in {first}.", "Okay.")
            statements = [Statement(index, first)]
            at = slot + rng.randint(3, 12)
            later.setdefault(at, []).append(_FollowUp("cross_section", thing, second, statements))
        else:
            request = rng.choice(_FILLER_REQUESTS)
            if oversize:
                request = b.oversized("Here is the status log I mentioned.")
            b.exchange(request, rng.choice(_FILLER_ANSWERS))
        for follow_up in later.pop(slot, []):
            _supersede(b, follow_up)
        # Sensor processes publish between exchanges.
        notes = config.notes_per_exchange
        while notes > 0:
            if rng.random() < min(notes, 1.0):
                if sensors and slot < config.exchanges * 3 // 4 and rng.random() < 0.35:
                    device, statements, _ = rng.choice(sensors)
                    value = _distinct(rng, lambda r, d=device: _reading(r, d), b.used)
                    text = f"{device.capitalize()} reads {value} {_UNITS[device]}."
                    statements.append(Statement(b.update("notes", text), value))
                else:
                    b.update("notes", rng.choice(_NOTE_FILLER))
            notes -= 1
        if slot % config.scene_every == 0:
            items = ", ".join(rng.sample(_SCENE_ITEMS, 3))
            b.update("scene", f"On the bench: {items}.")
    # Follow-ups scheduled past the last slot close the session.
    for at in sorted(later):
        for follow_up in later[at]:
            _supersede(b, follow_up)
    for device, statements, big in sensors:
        b.fact("sensor", f"What does the {device} read?", statements, big)
    return b


def generate_session(seed: int, config: SessionConfig = SessionConfig()) -> Session:
    """The session for ``seed``: identical for identical arguments."""
    rng = random.Random(seed)
    events: dict[str, tuple[Event, ...]] = {}
    facts: list[Fact] = []
    for n in range(config.participants):
        pid = f"p{n + 1}"
        builder = _participant(random.Random(rng.getrandbits(64)), pid, config)
        events[pid] = tuple(builder.events)
        facts.extend(builder.facts)
    return Session(seed, config, events, tuple(facts))
