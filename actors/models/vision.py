"""Whether a model takes images, as litellm's model map says (``supports_vision``).

Why: an image turn sent to a text-only hosted model fails at the provider with a
message that differs per provider, or worse, the image is silently dropped; checking the
map first fails the turn in the caller's words. A model the map does not describe (a
local server, a custom name) is asked anyway: its own server's refusal is the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType


def accepts_images(litellm: ModuleType, model: str) -> bool | None:
    """Whether litellm's model map says ``model`` takes images (``supports_vision``; a
    model it describes without the flag does not); None when the map does not describe
    it (a local or unknown model: its server decides)."""
    for key in (model, model.split("/", 1)[-1]):
        entry = litellm.model_cost.get(key)
        if isinstance(entry, Mapping):
            return bool(entry.get("supports_vision"))
    return None
