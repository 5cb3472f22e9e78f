"""Images of a user message as OpenAI ``image_url`` content blocks (data URLs).

``image_url`` turns one image into the URL a block carries: an ``http(s)://`` or
``data:`` URL as it is; a path (``str`` or ``os.PathLike``) to a PNG, JPEG, GIF or WebP
file as a base64 data URL of its bytes (the type from the file's suffix), a path to any
other image Pillow reads (BMP, TIFF, ...) and a PIL image encoded as PNG. Only those need
Pillow (``pip install 'xrmq[images]'``): without it they are a ``ValueError`` saying so,
as is anything that is not an image, naming the field and the rule.
"""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path
from typing import Any

from xrmq.schemas._validation import IMAGE_URL_PREFIXES

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
"""The file suffixes a path may have, and the media type its data URL names."""


def data_url(data: bytes, media_type: str) -> str:
    """``data`` as a base64 data URL of ``media_type``."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def image_url(image: Any, field: str = "images") -> str:
    """The URL an ``image_url`` block carries for ``image`` (see the module docstring)."""
    if isinstance(image, str) and image.startswith(IMAGE_URL_PREFIXES):
        return image
    if isinstance(image, str | os.PathLike):
        path = Path(image)
        media_type = IMAGE_TYPES.get(path.suffix.lower())
        try:
            if media_type is not None:
                return data_url(path.read_bytes(), media_type)
            return _png_url(_pillow(field, repr(str(path))).open(path), field)
        except OSError as error:  # missing, unreadable, or not an image Pillow knows
            raise ValueError(f"{field}: cannot read {str(path)!r} as an image: {error}") from None
    if callable(getattr(image, "save", None)) and hasattr(image, "mode"):
        return _png_url(image, field)
    raise ValueError(
        f"{field}: each image must be a path, an http(s) or data URL, or a PIL image "
        f"(got {type(image).__name__})"
    )


def _pillow(field: str, what: str) -> Any:
    try:
        import PIL.Image
    except ImportError:
        kinds = ", ".join(sorted(IMAGE_TYPES))
        raise ValueError(
            f"{field}: {what} needs Pillow (only {kinds} files are read without it): "
            "pip install 'xrmq[images]'"
        ) from None
    return PIL.Image


def _png_url(image: Any, field: str) -> str:
    buffer = io.BytesIO()
    try:
        image.save(buffer, format="PNG")
    except (OSError, ValueError) as error:
        raise ValueError(f"{field}: cannot encode the image as PNG: {error}") from None
    return data_url(buffer.getvalue(), "image/png")


def image_blocks(content: str, images: Any, field: str = "images") -> list[dict[str, Any]]:
    """``content`` and ``images`` as a text block then one ``image_url`` block per image."""
    if isinstance(images, str | os.PathLike) or not hasattr(images, "__iter__"):
        images = [images]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    for image in images:
        blocks.append({"type": "image_url", "image_url": {"url": image_url(image, field)}})
    return blocks
