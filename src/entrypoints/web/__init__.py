"""The web dashboard: a Starlette application (server-rendered Jinja2 pages, server-sent events,
SVG charts, no third-party JavaScript) over one Tether app's store.  Needs the ``tether[web]`` extra.

Modules: :mod:`.app` (``create_app``, routes, error pages), :mod:`.security` (authorization, CSRF,
origin checks, headers), :mod:`.params` (page parameters, 400s), :mod:`.pages` (GET),
:mod:`.actions` (POST, confirmed and audited), :mod:`.snapshot` (the reads), :mod:`.live`
(one snapshot per interval fanned out to every page), :mod:`.chart` (SVG), :mod:`.dashboard`
(shared state and the seams for optional features); ``templates/`` and ``static/`` beside them.
"""

from __future__ import annotations

from tether.entrypoints.web.app import create_app

__all__ = ["create_app"]
