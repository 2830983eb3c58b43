"""Alembic's script directory of Tether's schema (env.py, script.py.mako, versions/): see :mod:`..migrations`."""
