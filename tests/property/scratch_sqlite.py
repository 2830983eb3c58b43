"""Fresh SQLite database files for the state-machine tests, one per history, deleted afterwards.

The files go to a RAM-backed directory when there is one: these tests check what the repository
does, not durability, and fsync on a disk would be most of their time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tether.adapters.sqlalchemy import SqliteJobRepository, open_repository

_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def open_scratch_sqlite(prefix: str) -> SqliteJobRepository:
    """A repository on ``tether.db`` in a new temporary directory whose name starts with ``prefix``;
    give it back to :func:`close_scratch_sqlite`."""
    directory = tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH)
    repository = open_repository(f"sqlite:///{Path(directory) / 'tether.db'}")
    assert isinstance(repository, SqliteJobRepository)
    return repository


def close_scratch_sqlite(repository: SqliteJobRepository) -> None:
    """Close a repository of :func:`open_scratch_sqlite` and delete its directory."""
    database = repository.engine.url.database
    repository.close()
    if database:
        shutil.rmtree(Path(database).parent, ignore_errors=True)
