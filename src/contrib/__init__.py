"""Integrations of Tether with web frameworks, each behind an extra (``tether[fastapi]``, ...)."""
