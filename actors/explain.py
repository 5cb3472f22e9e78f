"""Why a value does not convert to a msgspec type, read from the type's structure.

``msgspec.convert`` decides whether a value fits a type; its error is text meant for
people. A config error names the key and the rule, so ``explain`` walks the value beside
``msgspec.inspect.type_info(type)`` (Structs, unions, containers, and the ``msgspec.Meta``
constraints of each field) and returns the first ``Problem``: where (a path of keys and
indexes) and what rule it breaks. Nothing here parses msgspec's messages.

Rules read, in this order of preference:

- a ``Meta(description=...)`` on the failing field: ``must be <description>, got <value>``
  (e.g. ``Budget``'s "a positive int of bytes");
- a Meta bound: ``must be >= 1``, ``must be > 0``, a length or a pattern;
- a wrong kind: ``must be an integer, got a string`` (TOML's words: a table, an array);
- a value of the right kind outside a ``Literal``'s choices: ``must be one of 'a', 'b',
  got 'c'`` (a Meta description words the choices otherwise: ``must be 'a' or 'b', got
  'c'``);
- a Struct's unknown key (with the closest allowed one) or missing required key.

Pure: msgspec only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, get_args, get_origin, get_type_hints

import msgspec
from msgspec import inspect as mi

Path = tuple[str | int, ...]


class Problem(msgspec.Struct, frozen=True):
    """Where a value breaks its type (``path``: keys and indexes from the top) and the rule."""

    path: Path
    rule: str

    def key(self, prefix: str = "") -> str:
        """The dotted key of ``path`` under ``prefix``: ``a.b[0].c``."""
        key = prefix
        for part in self.path:
            key = f"{key}[{part}]" if isinstance(part, int) else (f"{key}.{part}" if key else part)
        return key


_KINDS: dict[type, str] = {
    dict: "a table",
    list: "an array",
    tuple: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "nothing",
}


def kind_of(value: object) -> str:
    """How a config names the kind of ``value`` (TOML's words)."""
    for cls in type(value).__mro__:
        if cls in _KINDS:
            return _KINDS[cls]
    return type(value).__name__


def explain(value: Any, type_: Any, *, describe_kind: bool = False) -> Problem | None:
    """The first place ``value`` does not fit ``type_``, or None if the walk finds none.

    A field's Meta description states a broken bound; with ``describe_kind`` it also states
    a value of the wrong kind (a keyword argument: ``must be a positive int of bytes, got
    True``), else the kind is named (a config file: ``must be an integer, got a string``).
    """
    return _explain(value, mi.type_info(type_), (), describe_kind)


Choices = Mapping[frozenset[Any], tuple[Any, ...]]
"""The ``Literal`` choices of a field in the order its annotation writes them, by value set:
``type_info`` sorts a ``Literal``'s values, and a rule lists them as the author did."""
_NO_CHOICES: Choices = MappingProxyType({})


def _choices(annotation: Any) -> dict[frozenset[Any], tuple[Any, ...]]:
    if get_origin(annotation) is Literal:
        values = get_args(annotation)
        return {frozenset(values): values}
    found: dict[frozenset[Any], tuple[Any, ...]] = {}
    for argument in get_args(annotation):
        found.update(_choices(argument))
    return found


def _written(info: mi.LiteralType, choices: Choices) -> tuple[Any, ...]:
    return choices.get(frozenset(info.values), info.values)


def _expected(info: mi.Type, choices: Choices = _NO_CHOICES) -> str:
    if isinstance(info, mi.Metadata):
        return _expected(info.type, choices)
    if isinstance(info, mi.UnionType):
        return " or ".join(dict.fromkeys(_expected(member, choices) for member in info.types))
    if isinstance(info, mi.LiteralType):
        return " or ".join(repr(value) for value in _written(info, choices))
    return {
        mi.IntType: "an integer",
        mi.FloatType: "a number",
        mi.StrType: "a string",
        mi.BoolType: "a boolean",
        mi.NoneType: "nothing",
        mi.StructType: "a table",
        mi.DictType: "a table",
        mi.ListType: "an array",
        mi.TupleType: "an array",
        mi.VarTupleType: "an array",
        mi.SetType: "an array",
        mi.FrozenSetType: "an array",
    }.get(type(info), type(info).__name__)


def _fits_kind(value: Any, info: mi.Type) -> bool:
    """Whether ``value`` is of the kind ``info`` takes (bounds aside)."""
    if isinstance(info, mi.Metadata):
        return _fits_kind(value, info.type)
    if isinstance(info, mi.AnyType):
        return True
    if isinstance(info, mi.LiteralType):  # of a choice's kind; which choice is a rule
        return any(_same_kind(value, choice) for choice in info.values)
    if isinstance(info, mi.UnionType):
        return any(_fits_kind(value, member) for member in info.types)
    if isinstance(value, bool) or isinstance(info, mi.BoolType):
        return isinstance(value, bool) and isinstance(info, mi.BoolType)
    if isinstance(info, mi.IntType):
        return isinstance(value, int)
    if isinstance(info, mi.FloatType):
        return isinstance(value, (int, float))
    if isinstance(info, mi.StrType):
        return isinstance(value, str)
    if isinstance(info, mi.NoneType):
        return value is None
    if isinstance(info, (mi.StructType, mi.DictType)):
        return isinstance(value, dict)
    if isinstance(info, (mi.ListType, mi.TupleType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        return isinstance(value, (list, tuple))
    return True  # a type this walk does not model: msgspec's own check stands


def _same_kind(value: Any, choice: Any) -> bool:
    return isinstance(value, bool) == isinstance(choice, bool) and isinstance(value, type(choice))


def _bound(value: Any, info: mi.Type) -> str | None:
    """The Meta bound of a number or string that ``value`` breaks, as a rule."""
    if isinstance(info, (mi.IntType, mi.FloatType)):
        for name, op, ok in (
            ("ge", ">=", lambda b: value >= b),
            ("gt", ">", lambda b: value > b),
            ("le", "<=", lambda b: value <= b),
            ("lt", "<", lambda b: value < b),
        ):
            bound = getattr(info, name)
            if bound is not None and not ok(bound):
                return f"must be {op} {bound}"
        if info.multiple_of is not None and value % info.multiple_of:
            return f"must be a multiple of {info.multiple_of}"
    if isinstance(info, mi.StrType):
        if info.min_length is not None and len(value) < info.min_length:
            return f"must be at least {info.min_length} characters"
        if info.max_length is not None and len(value) > info.max_length:
            return f"must be at most {info.max_length} characters"
        if info.pattern is not None:
            if re.search(info.pattern, value) is None:
                return f"must match {info.pattern!r}"
    return None


def _explain(
    value: Any, info: mi.Type, path: Path, kinds: bool = False, choices: Choices = _NO_CHOICES
) -> Problem | None:
    if isinstance(info, mi.Metadata):
        problem = _explain(value, info.type, path, kinds, choices)
        description = (info.extra_json_schema or {}).get("description")
        described = kinds or _fits_kind(value, info.type)
        if problem is not None and problem.path == path and description and described:
            return Problem(path, f"must be {description}, got {value!r}")
        return problem
    if isinstance(info, mi.UnionType):
        members = [member for member in info.types if _fits_kind(value, member)]
        if not members:
            return Problem(path, f"must be {_expected(info, choices)}, got {kind_of(value)}")
        problems = [_explain(value, member, path, kinds, choices) for member in members]
        if any(problem is None for problem in problems):
            return None
        return problems[0]
    if not _fits_kind(value, info):
        return Problem(path, f"must be {_expected(info, choices)}, got {kind_of(value)}")
    if isinstance(info, mi.LiteralType) and value not in info.values:
        written = ", ".join(map(repr, _written(info, choices)))
        return Problem(path, f"must be one of {written}, got {value!r}")
    bound = _bound(value, info)
    if bound is not None:
        return Problem(path, bound)
    if isinstance(info, mi.StructType):
        return _explain_struct(value, info, path, kinds)
    if isinstance(info, mi.DictType):
        for key, item in value.items():
            problem = _explain(key, info.key_type, (*path, key), kinds) or _explain(
                item, info.value_type, (*path, key), kinds
            )
            if problem is not None:
                return problem
        return _length(value, info, path)
    if isinstance(info, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        for index, item in enumerate(value):
            problem = _explain(item, info.item_type, (*path, index), kinds)
            if problem is not None:
                return problem
        return _length(value, info, path)
    if isinstance(info, mi.TupleType):
        if len(value) != len(info.item_types):
            return Problem(path, f"must have {len(info.item_types)} items, got {len(value)}")
        for index, (item, item_info) in enumerate(zip(value, info.item_types, strict=True)):
            problem = _explain(item, item_info, (*path, index), kinds)
            if problem is not None:
                return problem
    return None


def _length(value: Any, info: Any, path: Path) -> Problem | None:
    if info.min_length is not None and len(value) < info.min_length:
        return Problem(path, f"must have at least {info.min_length} items")
    if info.max_length is not None and len(value) > info.max_length:
        return Problem(path, f"must have at most {info.max_length} items")
    return None


def _explain_struct(
    value: dict[str, Any], info: mi.StructType, path: Path, kinds: bool
) -> Problem | None:
    fields = {field.encode_name: field for field in info.fields}
    hints = get_type_hints(info.cls, include_extras=True)
    if info.forbid_unknown_fields:
        for key in value:
            if key not in fields:
                close = difflib.get_close_matches(str(key), list(fields), n=1)
                hint = (
                    f"; did you mean {close[0]!r}?"
                    if close
                    else (f" (allowed: {', '.join(fields)})" if fields else "")
                )
                return Problem((*path, key), f"unknown key{hint}")
    for name, field in fields.items():
        if name not in value:
            if field.required:
                return Problem((*path, name), "is required")
            continue
        choices = _choices(hints.get(field.name))
        problem = _explain(value[name], field.type, (*path, name), kinds, choices)
        if problem is not None:
            return problem
    return None
