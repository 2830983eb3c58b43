"""Payload encoding: canonical UTF-8 JSON with a size limit in bytes.

The rule, the same on every repository:
- allowed values: ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` and ``dict``
  with ``str`` keys, nested at most 64 deep;
- rejected: NaN and +/-Infinity, tuples, sets, bytes, datetimes, Decimals and any other type
  (JSON cannot carry them, or they would come back as something else);
- rejected: any string or key holding a NUL character (U+0000): PostgreSQL text and jsonb cannot
  store it, so no repository accepts it;
- rejected: any string or key holding a lone surrogate (U+D800 to U+DFFF, e.g. ``"\\ud800"`` or
  what ``surrogateescape`` makes of undecodable bytes): it has no UTF-8 encoding;
- rejected: an integer of more than 4,300 decimal digits (:data:`~tether.domain.limits.MAX_INT_DIGITS`;
  less where the process lowered ``sys.set_int_max_str_digits``): Python cannot read it back;
- the canonical form is ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
  and its UTF-8 length in bytes must not exceed the limit (default 65,536 bytes).
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from tether.domain.errors import PayloadError, shown
from tether.domain.limits import MAX_INT_DIGITS, int_digit_limit
from tether.domain.wording import with_article

DEFAULT_MAX_PAYLOAD_BYTES = 65_536
MAX_DEPTH = 64


def unencodable_problem(text: str) -> str | None:
    """What keeps ``text`` from being UTF-8 (its first lone surrogate, ``U+D800 at index 3``), or
    None when it encodes."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"holds a lone surrogate (U+{ord(text[error.start]):04X} at index {error.start}), which has no UTF-8 encoding"
    return None


@functools.lru_cache(maxsize=4)
def _int_bound(digits: int) -> int:
    """``10 ** digits``: the least integer with ``digits + 1`` digits."""
    return 10**digits


def _too_many_digits(value: int) -> int | None:
    """The digit limit when ``value`` has more decimal digits than :func:`int_digit_limit`, else None."""
    limit = int_digit_limit()
    if value.bit_length() < 3 * limit:  # |value| < 2 ** (3 * limit) < 10 ** limit
        return None
    return limit if abs(value) >= _int_bound(limit) else None


def _check(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise PayloadError(path, f"nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if type(value) is not int and not isinstance(value, bool):
            # IntEnum and friends would encode as ints and come back as plain ints.
            raise PayloadError(path, f"is {with_article(type(value).__name__)}; only plain int is JSON")
        limit = _too_many_digits(value)
        if limit is not None:
            raise PayloadError(path, f"is an integer of more than {limit:,} digits, which cannot be read back")
        return
    if isinstance(value, float):
        if type(value) is not float:
            raise PayloadError(path, f"is {with_article(type(value).__name__)}; only plain float is JSON")
        if not math.isfinite(value):
            raise PayloadError(path, f"is {shown(value)}; JSON has no NaN or Infinity")
        return
    if isinstance(value, str):
        if "\x00" in value:
            raise PayloadError(path, "holds a NUL character (U+0000), which no repository can store")
        problem = unencodable_problem(value)
        if problem is not None:
            raise PayloadError(path, problem)
        return
    if type(value) is list:
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", depth + 1)
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(path, f"has a key of type {type(key).__name__} ({shown(key)}); JSON object keys are strings")
            if "\x00" in key:
                raise PayloadError(path, "has a key holding a NUL character (U+0000)")
            problem = unencodable_problem(key)
            if problem is not None:
                raise PayloadError(path, f"has a key ({shown(key)}) that {problem}")
            _check(item, f"{path}.{key}", depth + 1)
        return
    raise PayloadError(path, f"is {with_article(type(value).__name__)}, which JSON cannot carry (use str, int, float, bool, None, list or dict)")


#: The canonical encoder (the settings of the module docstring), built once: ``json.dumps`` with
#: keyword arguments builds a new encoder on every call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _one_shot_encoder() -> Callable[[Any, int], tuple[str, ...]] | None:
    """The C encoder behind ``_ENCODER.encode``, built once with the same settings (``encode``
    builds a new one on every call: about half its time for a small payload), or None where the
    interpreter has none (``_ENCODER.encode`` is used then).

    No circular-reference bookkeeping: a payload reaches it only after :func:`_plainly_valid` or
    :func:`_check` found it at most :data:`MAX_DEPTH` deep, which no cycle is.
    """
    try:
        from _json import make_encoder  # CPython's accelerator, what json.encoder itself uses
    except ImportError:  # pragma: no cover - other interpreters
        return None
    try:  # the arguments json.encoder.JSONEncoder.iterencode passes (CPython 3.11-3.13)
        encoder: Callable[[Any, int], tuple[str, ...]] = make_encoder(
            None, _ENCODER.default, json.encoder.encode_basestring, None, _ENCODER.key_separator,
            _ENCODER.item_separator, True, False, False,
        )
        probe = {"b": [1, 2.5, None, True, "\u00e9\n"], "a": {}}
        if "".join(encoder(probe, 0)) != _ENCODER.encode(probe):
            return None
    except Exception:  # noqa: BLE001  # pragma: no cover - a signature this code does not know: the plain way
        return None
    return encoder


_ONE_SHOT = _one_shot_encoder()
#: Types whose values need no walk: the encoder itself refuses NaN/Infinity (``allow_nan``), and a
#: NUL in a string or key shows in the text as ``\u0000``.
_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})


def _plainly_valid(value: Any, depth: int) -> bool:
    """True when ``value`` is made only of exact dicts with exact-str keys, exact lists and leaf
    types, nested at most :data:`MAX_DEPTH` deep: what :func:`_check` would accept, NaN and NUL
    aside.  False means "not sure": :func:`_check` then gives the verdict (and the path)."""
    kind = type(value)
    if kind in _LEAF_TYPES:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) not in _LEAF_TYPES and not _plainly_valid(item, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _LEAF_TYPES and not _plainly_valid(item, depth + 1):
                return False
        return True
    return False


def encode_payload(payload: Any, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Validate ``payload`` and return its canonical JSON text.

    Args:
        payload: the job's arguments (see the module docstring for what is allowed).
        max_bytes: the limit on the UTF-8 length of the canonical text, in bytes.

    Raises:
        PayloadError: naming the path of the offending value (``payload.items[2]``,
            ``payload.s``) and why: a type JSON cannot carry, NaN/Infinity, a NUL or lone surrogate
            in a string or key, an integer of more than 4,300 digits, too deep, or too large.
    """
    # Fast path: one cheap type walk, then the C encoder.  Whenever something looks off (an odd
    # type, a NaN or an over-long integer the encoder refused, a possible NUL in the text, text
    # that is not UTF-8) the full check runs and raises naming the path, exactly as if it had run
    # first.  The encoder refuses integers past the process's int-to-str limit; where that limit
    # is above MAX_INT_DIGITS (or off), the walk checks them instead.
    if not _plainly_valid(payload, 0) or not 0 < sys.get_int_max_str_digits() <= MAX_INT_DIGITS:
        _check(payload, "payload", 0)
    try:
        text = "".join(_ONE_SHOT(payload, 0)) if _ONE_SHOT is not None else _ENCODER.encode(payload)
    except ValueError as error:
        _check(payload, "payload", 0)
        raise PayloadError("payload", f"cannot be encoded as JSON: {error}") from None
    if "\\u0000" in text:  # a NUL, or a string holding a backslash then "u0000"
        _check(payload, "payload", 0)
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate in a string or a key
        _check(payload, "payload", 0)
        raise PayloadError("payload", "is not encodable as UTF-8") from None
    if size > max_bytes:
        raise PayloadError("payload", f"is {size} bytes as canonical UTF-8 JSON; the limit is {max_bytes} bytes")
    return text
