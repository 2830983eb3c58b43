"""The example Flask app: ``create_app(config)``; run the worker with ``flask --app shopapp tether worker``."""

from __future__ import annotations

from typing import Any

from flask import Flask

from shopapp.jobs import tether_ext
from shopapp.models import db


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI="sqlite:///shop.db",
        TETHER_OPTIONS={"poll_interval": 0.2},
        TETHER_WORKER={"concurrency": 2, "drain_timeout": 5.0},
    )
    app.config.update(config or {})
    db.init_app(app)
    tether_ext.init_app(app)  # TETHER_DATABASE_URL defaults to Flask-SQLAlchemy's database
    from shopapp.views import orders

    app.register_blueprint(orders)
    return app
