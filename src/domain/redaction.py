"""What a message or a log line may show of a URL that holds a secret: the URL with every password
replaced by ``***``.

Database and Redis URLs carry passwords in two places: the authority (``user:secret@host``) and
the query (``?password=secret``, read by libpq and by redis-py).  Every error message and log line
that names a URL shows it through :func:`redact_url`, so neither ever reaches a log or a terminal.
"""

from __future__ import annotations

import re

#: A ``password=`` parameter in a query string (any case), up to the next ``&``.
_QUERY_PASSWORD = re.compile(r"(?i)((?:^|[?&;])password=)[^&;#]*")
HIDDEN = "***"


def redact_url(url: str, *, bare_userinfo_is_secret: bool = False) -> str:
    """``url`` with its passwords replaced by ``***``, everything else as given.

    ``postgresql+psycopg://app:s3cret@db/prod`` -> ``postgresql+psycopg://app:***@db/prod``;
    ``redis://cache:6379/0?password=s3cret`` -> ``redis://cache:6379/0?password=***``.

    Args:
        url: any text.  The user information is everything between ``://`` and the last ``@``
            before the query, so a password holding ``/``, ``@`` or ``[`` is hidden whole, even
            where the URL does not parse.
        bare_userinfo_is_secret: hide user information without a ``:`` too (``redis://s3cret@host``:
            some Redis clients read it as a password).  A database URL's bare user name is shown.

    Returns:
        The redacted text; never raises.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    redacted = _QUERY_PASSWORD.sub(lambda m: m.group(1) + HIDDEN, url)
    head, sep, rest = redacted.partition("://")
    authority_and_path = re.split(r"[?#]", rest, maxsplit=1)[0]
    if not sep or "@" not in authority_and_path:
        return redacted
    # The user information ends at the last "@" before the query: a password may hold "/" or "@".
    userinfo = authority_and_path.rsplit("@", 1)[0]
    after = rest[len(userinfo) + 1 :]
    user, colon, _secret = userinfo.partition(":")
    if colon:
        return f"{head}://{user}:{HIDDEN}@{after}"
    if bare_userinfo_is_secret:
        return f"{head}://{HIDDEN}@{after}"
    return redacted


__all__ = ["HIDDEN", "redact_url"]
