"""``GLOBAL``: the explicit "everyone" of a message sent while handling one participant's.

Apart from ``agent.py`` so that the send path checks it without importing the actors'
module; public as ``xrmq.actors.runtime.GLOBAL`` (and ``Scope``).
"""

from __future__ import annotations

import enum
from typing import Final


class Scope(enum.Enum):
    """The type of ``GLOBAL``."""

    GLOBAL = "global"

    def __repr__(self) -> str:
        return self.name


GLOBAL: Final = Scope.GLOBAL
"""``participant_id=GLOBAL``: publish to everyone, from a handler of one participant's message.

In ``RuntimeContext.publish`` and ``ask``, None (the default) keeps the current message's
participant, as upstream; GLOBAL is the explicit way out of it. ``AgentRuntime.publish``
accepts it too (there, None is already global: no message is being handled).
"""
