"""The dashboard's guards: who may look (HTTP Basic or the embedding app's ``authorize`` hook), the
headers of every answer (Content-Security-Policy without inline scripts, no framing, no caching),
and the checks of every state change (read-only, same origin, CSRF token).

CSRF is the double-submit pattern: each browser gets a random token in an HttpOnly, SameSite=Strict
cookie, every form carries the same token in a hidden field, and a POST whose field does not match
its cookie is refused (403) before anything is read or written.  A POST that a browser marks as
coming from another site (``Sec-Fetch-Site``) or whose ``Origin`` is not this server's is refused
too, token or not.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import inspect
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger("tether.web")

CSRF_COOKIE = "tether_csrf"
#: A CSRF cookie shorter than this is no token: the guard replaces it and no form field matches it.
MIN_TOKEN_CHARS = 32
CSRF_FIELD = "csrf_token"
#: No inline script or style anywhere: the pages load /static/dashboard.css and /static/live.js only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

#: ``authorize(request)``: the user's name (shown in the audit log), True (an unnamed user), or
#: False/None to refuse (401).  May be a coroutine function.
Authorize = Callable[[Request], "str | bool | None | Awaitable[str | bool | None]"]


class Forbidden(Exception):
    """A state change refused by a guard (answered 403 with this message; nothing changed)."""


def basic_authorizer(username: str, password: str) -> Authorize:
    """An ``authorize`` hook accepting exactly these HTTP Basic credentials (compared in constant time)."""
    expected_user, expected_password = username.encode(), password.encode()

    def authorize(request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            return None
        try:
            user, sep, given = base64.b64decode(encoded.strip(), validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return None
        user_ok = hmac.compare_digest(user, expected_user)
        password_ok = hmac.compare_digest(given, expected_password)
        return user.decode(errors="replace") if sep and user_ok and password_ok else None

    return authorize


class Guard:
    """ASGI middleware: refuse unauthorized requests (401), hand each request its user and CSRF
    token (``scope["tether.user"]``, ``scope["tether.csrf"]``), and add the security headers and,
    when the browser has none yet, the CSRF cookie to every answer."""

    def __init__(self, app: ASGIApp, *, authorize: Authorize, basic: bool) -> None:
        self.app = app
        self.authorize = authorize
        self.basic = basic

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        user = self.authorize(request)
        if inspect.isawaitable(user):
            user = await user
        if not user:
            headers = {"www-authenticate": 'Basic realm="tether", charset="UTF-8"'} if self.basic else {}
            response = PlainTextResponse("401 Unauthorized: credentials required", status_code=401, headers=headers)
            await _secured(response, scope, receive, send, cookie=None)
            return
        scope["tether.user"] = user if isinstance(user, str) else "authorized user"
        token = request.cookies.get(CSRF_COOKIE, "")
        fresh = None
        if len(token) < MIN_TOKEN_CHARS:
            token = fresh = secrets.token_urlsafe(32)
        scope["tether.csrf"] = token

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                _add_headers(headers, scope, fresh)
            await send(message)

        await self.app(scope, receive, send_secured)


async def _secured(response: Any, scope: Scope, receive: Receive, send: Send, *, cookie: str | None) -> None:
    async def send_secured(message: Message) -> None:
        if message["type"] == "http.response.start":
            _add_headers(MutableHeaders(scope=message), scope, cookie)
        await send(message)

    await response(scope, receive, send_secured)


def _add_headers(headers: MutableHeaders, scope: Scope, cookie: str | None) -> None:
    for name, value in SECURITY_HEADERS.items():
        headers[name] = value
    if cookie is not None:
        path = scope.get("root_path") or "/"
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        headers.append("set-cookie", f"{CSRF_COOKIE}={cookie}; Path={path}; HttpOnly; SameSite=Strict{secure}")


def check_state_change(request: Request, form: Mapping[str, Any], *, read_only: bool) -> str:
    """Check a POST before it acts; returns the user's name.

    Raises:
        Forbidden: a read-only dashboard; a request from another site or origin; a missing or
            wrong CSRF token.
    """
    if read_only:
        raise Forbidden("this dashboard is read-only")
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise Forbidden(f"cross-site request refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is not None and origin != _own_origin(request.headers, request.url.scheme):
        raise Forbidden("request from another origin refused")
    given = form.get(CSRF_FIELD)
    expected = request.cookies.get(CSRF_COOKIE, "")
    if len(expected) < MIN_TOKEN_CHARS:
        expected = ""  # a short cookie is no token (the guard has sent a fresh one)
    if not isinstance(given, str) or not given or not expected or not _same(given, expected):
        raise Forbidden("missing or invalid CSRF token: reload the page and try again")
    return str(request.scope.get("tether.user", "unknown"))


def _same(given: str, expected: str) -> bool:
    """Whether two tokens are equal, in constant time; any text (``hmac.compare_digest`` refuses
    non-ASCII ``str``, which a form field or a cookie may hold)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def _own_origin(headers: Headers, scheme: str) -> str:
    return f"{scheme}://{headers.get('host', '')}"


__all__ = [
    "CONTENT_SECURITY_POLICY",
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "Authorize",
    "Forbidden",
    "Guard",
    "basic_authorizer",
    "check_state_change",
]
