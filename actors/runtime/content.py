"""A message from text: the standard topic of a name, and its payload from a command line.

``topic_for`` and ``parse_content`` are what ``xrmq publish`` and the ``Publisher`` share:
a topic named on a command line (a standard topic, else a context topic), and its message
from a JSON object of the topic's fields or, for the two text topics, from plain text.
Pure functions of the schemas and topics, so the kernel keeps them and every layer above
may use them.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from xrmq.schemas import ConversationContextUpdate, UserQuery
from xrmq.topics import STANDARD_TOPICS, Topic, context_topic


def topic_for(name: str) -> Topic:
    """A standard topic by name, else the context topic of that name."""
    for topic in STANDARD_TOPICS:
        if topic.name == name:
            return topic
    return context_topic(name)


def parse_content(topic: Topic, content: str) -> Any:
    """Build the payload from text or a JSON object; ``ValueError`` naming the rule."""
    stripped = content.lstrip()
    if stripped.startswith("{"):
        try:
            return msgspec.json.decode(content.encode(), type=topic.message_type)
        except msgspec.ValidationError as error:
            raise ValueError(f"content: {error}") from None
        except msgspec.DecodeError as error:
            raise ValueError(f"content: invalid JSON: {error}") from None
    if topic.message_type is UserQuery:
        return UserQuery(content, time.time_ns() // 1000)
    if topic.message_type is ConversationContextUpdate:
        return ConversationContextUpdate(content)
    raise ValueError(
        f"content: topic {topic.name!r} needs a JSON object of {topic.message_type.__name__} fields"
    )
