"""Which message types are deeply immutable, so that local subscribers may share one object."""

from __future__ import annotations

import datetime
import decimal
import enum
import importlib
import uuid
from typing import Annotated, Any, Literal, NamedTuple, NewType, Optional

import msgspec
import pytest

from xrmq.topics import METRICS_TOPIC, STANDARD_TOPICS, Topic, deeply_immutable

Name = NewType("Name", str)


class Colour(enum.Enum):
    RED = "red"


class Point(msgspec.Struct, frozen=True):
    x: int
    y: float


class Scalars(msgspec.Struct, frozen=True):
    a: None
    b: bool
    c: int
    d: float
    e: str
    f: bytes
    g: datetime.datetime
    h: datetime.date
    i: datetime.time
    j: datetime.timedelta
    k: uuid.UUID
    m: decimal.Decimal
    n: Colour
    o: Literal["a", "b"]
    p: Annotated[str, msgspec.Meta(min_length=1)]
    q: Name


class Nested(msgspec.Struct, frozen=True):
    points: tuple[Point, ...]
    pair: tuple[Point, str]
    tags: frozenset[str]
    maybe: Point | None = None
    either: int | str | None = None


class WithList(msgspec.Struct, frozen=True):
    labels: list[str]


class Mutable(msgspec.Struct):
    x: int


class PairRow(NamedTuple):
    x: int
    y: str


class Tree(msgspec.Struct, frozen=True):
    label: str
    children: tuple[Tree, ...] = ()


class ListTree(msgspec.Struct, frozen=True):
    label: str
    children: tuple[ListTree, ...] = ()
    notes: list[str] = []


def _frozen_struct_with(annotation: Any) -> type:
    return msgspec.defstruct("Holder", [("field", annotation)], frozen=True)


def test_a_frozen_struct_of_immutable_scalars_is_deeply_immutable():
    assert deeply_immutable(Scalars)
    assert deeply_immutable(Point)


def test_frozen_structs_in_tuples_frozensets_and_unions_stay_deeply_immutable():
    assert deeply_immutable(Nested)
    assert deeply_immutable(_frozen_struct_with(PairRow))


def test_a_list_inside_a_frozen_struct_makes_it_mutable():
    assert not deeply_immutable(WithList)


def test_a_struct_that_is_not_frozen_is_mutable_even_with_scalar_fields():
    assert not deeply_immutable(Mutable)
    assert not deeply_immutable(_frozen_struct_with(Mutable))


@pytest.mark.parametrize(
    "annotation",
    [
        list[int],
        dict[str, int],
        set[int],
        bytearray,
        memoryview,
        Any,
        msgspec.Raw,
        tuple[list[int], ...],
        tuple[int, dict[str, int]],
        frozenset[Point] | list[int],
        Optional[WithList],  # noqa: UP045  (the typing.Optional spelling is the case)
        Annotated[list[str], msgspec.Meta(max_length=3)],
    ],
)
def test_a_mutable_part_anywhere_makes_the_type_mutable(annotation):
    assert not deeply_immutable(_frozen_struct_with(annotation))


def test_a_recursive_frozen_struct_is_decided_without_looping():
    assert deeply_immutable(Tree)
    assert not deeply_immutable(ListTree)


def test_a_type_msgspec_cannot_decode_is_not_shared():
    assert not deeply_immutable(object)


def test_the_decision_is_made_once_per_type():
    kind = msgspec.defstruct("OncePerType", [("text", str)], frozen=True)
    before = deeply_immutable.cache_info()
    first = Topic("test.immutable.once.a", kind)
    second = Topic("test.immutable.once.b", kind)
    after = deeply_immutable.cache_info()
    assert first.shared and second.shared
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


def test_every_topic_type_xrmq_declares_is_shared_except_the_metrics_dicts():
    for package in (
        "xrmq.actors.context",
        "xrmq.actors.routing",
        "xrmq.actors.voice",
        "xrmq.actors.conversation",
        "xrmq.actors.edge.demo",
    ):
        importlib.import_module(package)
    from xrmq.topics._topic import _registry

    types = {kind for kind in _registry.values() if kind.__module__.startswith("xrmq.")}
    assert len(types) >= len({topic.message_type for topic in STANDARD_TOPICS})
    assert sorted(kind.__qualname__ for kind in types if not deeply_immutable(kind)) == [
        "RuntimeMetrics"
    ]
    assert not METRICS_TOPIC.shared
    assert all(topic.shared for topic in STANDARD_TOPICS if topic is not METRICS_TOPIC)
