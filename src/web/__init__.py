"""``tether.web``: the operator's dashboard as an ASGI application (``pip install 'tether-jobs[web]'``).

``tether.web.create_app(app, *, authorize=None, read_only=False, username=None, password=None)``
returns a Starlette application to serve with uvicorn (``tether dashboard`` does) or to mount in
FastAPI, Starlette or Django's ASGI routing::

    from tether.web import create_app
    dashboard = create_app(app, username="ops", password=os.environ["TETHER_DASHBOARD_PASSWORD"])
    fastapi_app.mount("/tether", dashboard)

It lives in :mod:`tether.entrypoints.web`; this module is its public name.
"""

from __future__ import annotations

from tether.entrypoints.web import create_app

__all__ = ["create_app"]
