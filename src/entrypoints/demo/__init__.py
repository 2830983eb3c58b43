"""``tether demo``: hash every file of a real directory tree as durable jobs, and report.

What it does, in order:

1. Finds the files: every ``--pattern`` (default ``*.py``) file under ``--path`` (default: this
   Python's standard library, ``sysconfig.get_paths()["stdlib"]``), skipping ``site-packages``,
   ``dist-packages`` and ``__pycache__`` folders and symbolic links.
2. Opens the store: by default a SQLite file ``<out>/demo.db`` (``--out`` defaults to
   ``./tether-demo``); ``--database-url`` picks another (``memory://``, PostgreSQL).
3. Enqueues one ``demo.file_stats`` job per file on queue ``demo``, in batches, with the file's
   absolute path as idempotency key: a second run over the same tree adds nothing and says
   "0 new jobs, N already known".
4. Runs a worker pool (``--workers`` threads) until no demo job is queued, retrying or running,
   with a progress bar.  Each job computes SHA-256, lines and words of its file and appends them
   to ``<out>/results.jsonl``.  A planned share of jobs fails (see
   :mod:`tether.entrypoints.demo.tasks`): transient failures retry with a short backoff
   (base 0.05 s, cap 1 s), permanent ones go ``dead`` at once.
5. Prints a summary (counts by status, jobs/s, enqueue-to-start latency p50/p99, where the
   results and the database are), writes it to ``<out>/summary.json``, and returns True only if
   every job of the tree ended as designed: completed with its result stored, or dead exactly
   where the plan says "permanent"; and no demo job is left queued, running or retrying.

The demo reads no ``TETHER_*`` variables: its flags alone decide, so a run is reproducible.

The package: ``options`` (the validated options and the demo's fixed job settings), ``tasks``
(what each job does, the failure plan, the results file, the latency recorder), ``run`` (finding
the files, enqueueing, the worker pool with its progress bar: :func:`run_demo`), ``report`` (the
verdict and the summary printed and written).  The ``tether demo`` command is
:mod:`tether.entrypoints.cli.demo`.
"""

from __future__ import annotations

from tether.entrypoints.demo.options import DEMO_RETRY_POLICY, JOB_TYPE, MAX_ATTEMPTS, QUEUE, DemoOptions, default_path
from tether.entrypoints.demo.report import percentile
from tether.entrypoints.demo.run import find_files, idempotency_key, relative_key, run_demo
from tether.entrypoints.demo.tasks import make_handler

__all__ = [
    "DEMO_RETRY_POLICY",
    "JOB_TYPE",
    "MAX_ATTEMPTS",
    "QUEUE",
    "DemoOptions",
    "default_path",
    "find_files",
    "idempotency_key",
    "make_handler",
    "percentile",
    "relative_key",
    "run_demo",
]
