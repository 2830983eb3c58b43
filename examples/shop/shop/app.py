"""Production wiring: one Tether app with the shop's handlers.

Run the workers with ``tether worker --app shop.app:create_app`` (a factory works as well as an
object), after setting ``TETHER_DATABASE_URL``.
"""

from __future__ import annotations

import os

import tether

from shop.emails import Mailer, Outbox, register_handlers


def create_app(mailer: Mailer | None = None) -> tether.Tether:
    app = tether.connect(os.environ.get("TETHER_DATABASE_URL", "sqlite:///shop-jobs.db"),
                         redis_url=os.environ.get("TETHER_REDIS_URL"))
    register_handlers(app, mailer or Outbox())
    return app
