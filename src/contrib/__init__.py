"""Tether inside web frameworks: one optional package per framework (``tether[fastapi]``,
``tether[django]``, ``tether[flask]``).

Each builds its :class:`~tether.Tether` app through ``tether.connect`` (the composition root) or
takes one, and never imports an adapter; nothing here is imported by the core.
"""
