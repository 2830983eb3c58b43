"""Tether's schema revisions, numbered 0001, 0002, ... (loaded by Alembic from their files, not imported)."""
