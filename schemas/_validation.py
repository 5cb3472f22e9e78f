"""Shared validation helpers for wire types.

msgspec checks types while decoding; the rules a type cannot express (non-empty text,
field combinations) live in each Struct's ``__post_init__``, which msgspec runs both on
construction and on decode. Every rule raises ``ValueError`` naming the field and the
rule, so a caller (or a dropped-frame log line) says exactly what was wrong.
"""

from __future__ import annotations


def require(condition: bool, type_name: str, field: str, rule: str) -> None:
    """Raise ``ValueError("<Type>.<field>: <rule>")`` unless ``condition`` holds."""
    if not condition:
        raise ValueError(f"{type_name}.{field}: {rule}")


def require_text(value: str, type_name: str, field: str) -> None:
    """Require non-blank text."""
    require(bool(value and value.strip()), type_name, field, "must be non-empty text")


def require_name(value: str, type_name: str, field: str) -> None:
    """Require a non-empty identifier without NUL bytes (NUL terminates wire keys)."""
    require(bool(value), type_name, field, "must be a non-empty string")
    require("\x00" not in value, type_name, field, "must not contain NUL characters")


def is_name(value: object, *, blank: bool = True) -> bool:
    """Whether ``value`` can name something on the bus: a non-empty string without NUL.

    NUL ends the fields of a wire key (``topics``), so no identifier that reaches one may
    hold it. ``blank=False`` also refuses a string of only whitespace.
    """
    return (
        isinstance(value, str)
        and bool(value)
        and "\x00" not in value
        and (blank or not value.isspace())
    )


def check_name(value: object, label: str) -> str:
    """``value`` if ``is_name(value)``, else ``ValueError("<label>: must be a non-empty string
    without NUL")``: the one check of runtime, actor, participant, destination and namespace
    names."""
    if not is_name(value):
        raise ValueError(f"{label}: must be a non-empty string without NUL")
    return value  # type: ignore[return-value]  # is_name checked it is a str


def check_positive(value: object, label: str) -> int:
    """``value`` if it is an int of at least 1 (not a bool): a capacity, a count or a limit.

    ``ValueError("<label>: must be an int >= 1")`` otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label}: must be an int >= 1")
    return value


IMAGE_URL_PREFIXES = ("data:image/", "https://", "http://")
"""What an image in a message may be: a data URL of an image, or an http(s) URL."""


def require_image_urls(images: tuple[str, ...], type_name: str, field: str) -> None:
    """Require each of ``images`` to be an image data URL or an http(s) URL."""
    for image in images:
        require(
            isinstance(image, str) and image.startswith(IMAGE_URL_PREFIXES),
            type_name,
            field,
            "each must be a data:image/ URL or an http(s) URL",
        )
