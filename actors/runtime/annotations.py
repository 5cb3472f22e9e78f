"""Whether a handler's message annotation admits its topic's type (checked at registration).

A handler annotated for one type and subscribed to a topic of another would receive
values its code does not expect; the runtime refuses it at ``register`` instead, with a
``TypeError`` naming the handler, the topic and both types (as the upstream runtime
does). An unannotated message parameter is allowed.

xrmq admits what a type checker would: the topic's type itself, a base class of it
(``msgspec.Struct``, ``object``), ``Any``, a union with an admitting member (one handler
may subscribe to several topics), a ``TypeVar`` whose bound or constraints admit it.
Upstream requires exactly the topic's class. String annotations (``from __future__
import annotations``) are resolved in the handler's module; one that cannot be resolved
there (a name imported only under ``TYPE_CHECKING``, a class local to a function) is
compared by name: it admits the type when it mentions the type's name.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

EMPTY = inspect.Parameter.empty
"""What ``message_annotation`` returns for an unannotated message parameter."""


def message_annotation(handler: Callable[..., Any], owner: type) -> Any:
    """The annotation of ``handler``'s message parameter (the one after ``self``), resolved
    in the handler's module and ``owner``'s namespace where it can be, else its text;
    ``EMPTY`` when there is none."""
    params = list(inspect.signature(handler).parameters.values())
    annotation = params[1].annotation
    if not isinstance(annotation, str):
        return annotation
    holder = types.SimpleNamespace(__annotations__={"message": annotation})
    try:
        hints = typing.get_type_hints(
            holder, globalns=getattr(handler, "__globals__", {}), localns=dict(vars(owner))
        )
    except (NameError, AttributeError, TypeError, SyntaxError):  # unresolvable here: keep the text
        return annotation
    return hints["message"]


def admits(annotation: Any, message_type: type) -> bool:
    """Whether a parameter annotated ``annotation`` accepts a ``message_type`` value."""
    if annotation is Any:
        return True
    if isinstance(annotation, str):
        return (
            re.search(rf"(?<!\w){re.escape(message_type.__name__)}(?!\w)", annotation) is not None
        )
    if isinstance(annotation, typing.TypeVar):
        if annotation.__constraints__:
            return any(admits(option, message_type) for option in annotation.__constraints__)
        return annotation.__bound__ is None or admits(annotation.__bound__, message_type)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(admits(member, message_type) for member in typing.get_args(annotation))
    if isinstance(annotation, typing.ForwardRef):
        return admits(annotation.__forward_arg__, message_type)
    if typing.get_origin(annotation) is typing.Annotated:
        return admits(typing.get_args(annotation)[0], message_type)
    try:
        return isinstance(annotation, type) and issubclass(message_type, annotation)
    except TypeError:  # a parameterized generic (list[int]): never a Struct's base
        return False


def describe(annotation: Any) -> str:
    """A short name for an annotation in an error message."""
    if isinstance(annotation, type):
        return annotation.__qualname__
    if isinstance(annotation, str):
        return repr(annotation)
    return str(annotation).replace("typing.", "")
