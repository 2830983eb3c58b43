"""Turning any exception into a bounded, storable ``last_error`` text (cases C11, C18)."""

from __future__ import annotations

DEFAULT_MAX_ERROR_CHARS = 4_000


def sanitize_text(text: str, max_chars: int = DEFAULT_MAX_ERROR_CHARS) -> str:
    """Make ``text`` storable everywhere: NUL shown as ``\\x00``, lone surrogates escaped,
    and at most ``max_chars`` characters (a truncation says how long the original was)."""
    text = text.replace("\x00", "\\x00")
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > max_chars:
        marker = f"... [truncated from {len(text)} chars]"
        if len(marker) >= max_chars:  # a limit too small for the marker: cut, still within the limit
            return text[: max(max_chars, 0)]
        text = text[: max_chars - len(marker)] + marker
    return text


def describe_failure(exc: BaseException, max_chars: int = DEFAULT_MAX_ERROR_CHARS) -> str:
    """``"TypeName: message"`` for any exception, never raising.

    An exception whose ``__str__`` raises is described as ``"TypeName: <unprintable: ...>"``;
    a huge message is truncated to ``max_chars`` characters.
    """
    try:
        name = type(exc).__qualname__
    except Exception:  # noqa: BLE001  # pragma: no cover - a type always has a name, but never trust it
        name = "Exception"
    try:
        message = str(exc)
    except BaseException as inner:  # noqa: BLE001 - whatever __str__ does, we must not fail
        try:
            inner_name = type(inner).__name__
        except Exception:  # noqa: BLE001  # pragma: no cover - describing a failure must not fail
            inner_name = "error"
        message = f"<unprintable: str() raised {inner_name}>"
    if not isinstance(message, str):  # pragma: no cover - str() always returns str
        message = "<unprintable>"
    return sanitize_text(f"{name}: {message}" if message else name, max_chars)
