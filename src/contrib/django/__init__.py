"""Tether for Django: a backend of Django's tasks framework, ``manage.py tether_worker``, and a
migration that creates Tether's tables (``pip install "tether-jobs[django]"``).

Add ``"tether.contrib.django"`` to ``INSTALLED_APPS``, point ``TASKS`` at
``"tether.contrib.django.backend.TetherBackend"`` and, optionally, set one ``TETHER`` dict
(see :mod:`tether.contrib.django.conf`).  ``task.enqueue(...)`` then stores a Tether job on
Django's own database connection, inside the current ``atomic()`` block: a rollback leaves no
job, and workers are woken through ``transaction.on_commit``.

Django's tasks framework is ``django.tasks`` on Django 6 (Python 3.12+) and the ``django-tasks``
backport on Django 5.2; :mod:`.tasks_api` imports whichever is present.
"""
