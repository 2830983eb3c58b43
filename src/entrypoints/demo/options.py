"""The options of one ``tether demo`` run, checked before anything is created, and the demo's fixed job settings."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import attrs
from tether.domain.errors import ValidationError
from tether.domain.retry import RetryPolicy
from tether.entrypoints.settings import InvalidSetting, check_redis_url, database_kind, redact_url

JOB_TYPE = "demo.file_stats"
QUEUE = "demo"
MAX_ATTEMPTS = 3
DEMO_RETRY_POLICY = RetryPolicy(base_seconds=0.05, cap_seconds=1.0, jitter=0.1)


def default_path() -> Path:
    """This Python's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


@attrs.frozen
class DemoOptions:
    """Validated options of one demo run (build with :meth:`create`)."""

    root: Path
    pattern: str
    database_url: str
    redis_url: str | None
    redis_prefix: str
    schema: str | None
    workers: int
    out: Path
    fresh: bool
    default_database: bool

    @classmethod
    def create(
        cls,
        *,
        path: str | None = None,
        pattern: str = "*.py",
        database_url: str | None = None,
        redis_url: str | None = None,
        redis_prefix: str = "tether",
        schema: str | None = None,
        workers: int = 4,
        out: str = "tether-demo",
        fresh: bool = False,
    ) -> DemoOptions:
        """Check the options before anything is created.

        Raises:
            ValidationError: ``path`` is not a directory, ``pattern`` is empty, ``workers`` is not
                1-256, ``fresh`` with a database that is not a SQLite file or ``memory://``, or a
                bad ``database_url`` / ``redis_url`` (the CLI names ``--database-url`` / ``--redis-url``).
        """
        root = Path(path).expanduser() if path is not None else default_path()
        if not root.is_dir():
            raise ValidationError("path", f"{str(root)!r} is not a directory")
        if not pattern or "/" in pattern or os.sep in pattern:
            raise ValidationError("pattern", f"must be a file-name glob such as '*.py', got {pattern!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
            raise ValidationError("workers", f"must be an integer from 1 to 256, got {workers!r}")
        out_dir = Path(out).expanduser().resolve()
        if out_dir.exists() and not out_dir.is_dir():
            raise ValidationError("out", f"{str(out_dir)!r} exists and is not a directory")
        default_database = database_url is None
        if database_url is None:
            database_url = f"sqlite:///{out_dir / 'demo.db'}"
        try:
            kind = database_kind(database_url)
            check_redis_url(redis_url)
        except InvalidSetting as error:  # the demo reads no TETHER_* variable: name the flag alone
            raise ValidationError(error.setting, error.problem) from None
        if fresh and kind == "postgresql":
            raise ValidationError(
                "fresh", f"only a SQLite file or memory:// can be started afresh; for {redact_url(database_url)} use a new --schema"
            )
        return cls(
            root=root.resolve(),
            pattern=pattern,
            database_url=database_url,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
            schema=schema,
            workers=workers,
            out=out_dir,
            fresh=fresh,
            default_database=default_database,
        )

    @property
    def results_path(self) -> Path:
        """``<out>/results.jsonl``: one JSON line per file the jobs hashed."""
        return self.out / "results.jsonl"

    @property
    def summary_path(self) -> Path:
        """``<out>/summary.json``: the report of the last run."""
        return self.out / "summary.json"

    @property
    def log_path(self) -> Path:
        """``<out>/worker.log``: the ``tether`` loggers during the run."""
        return self.out / "worker.log"


__all__ = ["DEMO_RETRY_POLICY", "JOB_TYPE", "MAX_ATTEMPTS", "QUEUE", "DemoOptions", "default_path"]
