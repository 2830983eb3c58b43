"""The Django application of Tether (``INSTALLED_APPS += ["tether.contrib.django"]``)."""

from __future__ import annotations

from django.apps import AppConfig


class TetherConfig(AppConfig):
    """Registers Tether's migration (its tables), ``manage.py tether_worker`` and the reload of
    the ``TETHER`` settings (:mod:`.conf`)."""

    name = "tether.contrib.django"
    label = "tether"
    verbose_name = "Tether jobs"

    def ready(self) -> None:
        from tether.contrib.django import conf

        conf.connect_signals()
