"""Repositories on SQLAlchemy Core: the shared schema, SQLite and PostgreSQL."""
