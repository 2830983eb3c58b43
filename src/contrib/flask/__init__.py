"""Tether for Flask: :class:`TetherExtension` and the ``flask tether worker`` command (``pip install "tether-jobs[flask]"``).

::

    tether_ext = TetherExtension()

    @tether_ext.handler("emails.send")
    def send(payload): ...              # runs inside the Flask app's application context

    def create_app():
        app = Flask(__name__)
        app.config["TETHER_DATABASE_URL"] = "postgresql+psycopg://..."
        tether_ext.init_app(app)
        return app

    # in a view: the job joins Flask-SQLAlchemy's transaction (a rollback leaves no job)
    tether_ext.enqueue("emails.send", {"to": ...}, connection=db.session)

See :mod:`tether.contrib.flask.extension` for the configuration keys.
"""

from tether.contrib.flask.extension import TetherExtension

__all__ = ["TetherExtension"]
