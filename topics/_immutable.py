"""Whether a message type is deeply immutable: the rule that lets subscribers share one object.

Actors keep private state, so a message handed to one local subscriber must not be
changeable by another. A runtime that decodes a payload once and hands the same object
to every local subscriber is only safe when nothing in that object can change:
``frozen=True`` alone is not enough, since a list or dict field of a frozen Struct
stays mutable. ``deeply_immutable`` decides that once per type, from msgspec's own view
of the type (``msgspec.inspect``: forward references, generics, ``Annotated``,
``NewType`` and recursive types are resolved the way the decoder resolves them).

Immutable all the way down: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
dates and times, ``UUID``, ``Decimal``, enums, literals; tuples and frozensets of
immutable items; unions of immutable members; frozen Structs and NamedTuples whose
fields are all immutable. Everything else counts as mutable: lists, dicts, sets,
bytearrays, memoryviews, ``Any`` (it decodes arrays to lists), non-frozen Structs,
dataclasses, attrs classes, TypedDicts, msgspec ``Raw``/``Ext`` and custom types. The
rule errs on the side of copying: a type counted mutable costs a decode per subscriber,
never a shared object.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from msgspec import inspect as mi

_LEAVES: tuple[type[mi.Type], ...] = (
    mi.NoneType,
    mi.BoolType,
    mi.IntType,
    mi.FloatType,
    mi.StrType,
    mi.BytesType,
    mi.DateTimeType,
    mi.TimeType,
    mi.DateType,
    mi.TimeDeltaType,
    mi.UUIDType,
    mi.DecimalType,
    mi.EnumType,
    mi.LiteralType,
)


@functools.cache
def deeply_immutable(message_type: Any) -> bool:
    """True when no value of ``message_type`` can be changed after decoding (see the module).

    Cached: the answer is a property of the type, decided once.
    """
    try:
        info = mi.type_info(message_type)
    except (TypeError, ValueError, NameError):  # not a type msgspec can decode: nothing to share
        return False
    return _immutable(info, set())


def _immutable(node: mi.Type, visiting: set[int]) -> bool:
    """Walk msgspec's type tree. A recursive type refers back to a node being checked; that
    reference is assumed immutable, and the outer check decides (co-inductively)."""
    if isinstance(node, _LEAVES):
        return True
    if isinstance(node, mi.Metadata):  # Annotated[T, Meta(...)]: constraints on T
        return _immutable(node.type, visiting)
    if isinstance(node, mi.UnionType):
        return all(_immutable(member, visiting) for member in node.types)
    if isinstance(node, (mi.VarTupleType, mi.FrozenSetType)):
        return _immutable(node.item_type, visiting)
    if isinstance(node, mi.TupleType):
        return all(_immutable(item, visiting) for item in node.item_types)
    if isinstance(node, (mi.StructType, mi.NamedTupleType)):
        if isinstance(node, mi.StructType) and not _frozen(node.cls):
            return False
        if id(node) in visiting:
            return True
        visiting.add(id(node))
        return all(_immutable(field.type, visiting) for field in node.fields)
    return False


def _frozen(cls: type) -> bool:
    config = getattr(cls, "__struct_config__", None)
    return bool(config is not None and config.frozen) and issubclass(cls, msgspec.Struct)
