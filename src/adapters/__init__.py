"""Adapters: repositories (memory, SQLite, PostgreSQL), dispatchers (polling, Redis Streams), clocks."""
