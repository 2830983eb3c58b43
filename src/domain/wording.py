"""Grammar for Tether's messages: the indefinite article before a word such as a type name."""

from __future__ import annotations


def with_article(word: str) -> str:
    """``word`` after ``a`` or ``an``: ``"an int"``, ``"an OrderedDict"``, ``"a tuple"``.

    The article follows the first letter (a vowel takes ``an``), which suits Python type names;
    words whose sound differs from their spelling (``"UUID"``) are not special-cased.
    """
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


__all__ = ["with_article"]
