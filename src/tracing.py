"""OpenTelemetry traces for Tether (``pip install 'tether-jobs[otel]'``).

``instrument(app)`` makes ``app.enqueue`` open a ``send`` span and store its context with the job,
and every worker pool the app builds run each handler in a ``process`` span linked to it.  See
:mod:`tether.entrypoints.observability.tracing`.
"""

from tether.entrypoints.observability.tracing import MESSAGING_SYSTEM, TetherTracing, instrument, uninstrument

__all__ = ["MESSAGING_SYSTEM", "TetherTracing", "instrument", "uninstrument"]
