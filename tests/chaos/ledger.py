"""What the chaos test records beside Tether's own table, in the run's schema, and how it reads
it back.

- ``chaos_executions``: one row per handler execution (written by the handler itself, see
  chaos_app.py): job id, the lease token from ``ctx``, the attempt, the worker's pid.
- the jobs' own attempt history, read as the repository reads it (``row_to_job``: the ``history``
  column and a completed attempt kept in the lease columns): how each attempt ended, the outcomes
  in order (``JobRecord.history``).
- ``chaos_outcomes``: one row per UPDATE of ``tether_jobs`` that leaves a job ``completed`` or
  ``dead``, written by a trigger in the same transaction as the update: the job, its status and
  lease token before the update, its status and attempts after.  A job whose outcome was
  committed twice has two rows.

:func:`install` creates both (and the trigger); :func:`read_jobs` joins them to the jobs;
:func:`leases_of` counts the running jobs of one worker.
"""

from __future__ import annotations

import collections

import attrs
from sqlalchemy.engine import Engine
from tether.adapters.sqlalchemy.mapping import row_to_job

TERMINAL = ("completed", "dead")


def install(engine: Engine, schema: str) -> None:
    """Create the two tables, the trigger function and the trigger in ``schema`` (whose
    ``tether_jobs`` exists); they go when the schema is dropped."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"""
            CREATE TABLE "{schema}".chaos_executions (
                execution text PRIMARY KEY,
                job_id bigint NOT NULL,
                token text NOT NULL,
                attempt integer NOT NULL,
                pid integer NOT NULL,
                at timestamptz NOT NULL DEFAULT clock_timestamp()
            );
            CREATE TABLE "{schema}".chaos_outcomes (
                id bigserial PRIMARY KEY,
                job_id bigint NOT NULL,
                old_status text NOT NULL,
                old_token text,
                new_status text NOT NULL,
                attempts integer NOT NULL,
                at timestamptz NOT NULL DEFAULT clock_timestamp()
            );
            CREATE FUNCTION "{schema}".chaos_log_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO "{schema}".chaos_outcomes (job_id, old_status, old_token, new_status, attempts)
                VALUES (NEW.id, OLD.status, OLD.lease_token, NEW.status, NEW.attempts);
                RETURN NULL;
            END
            $$;
            CREATE TRIGGER chaos_log_outcome AFTER UPDATE ON "{schema}".tether_jobs
                FOR EACH ROW WHEN (NEW.status IN {TERMINAL!r})
                EXECUTE FUNCTION "{schema}".chaos_log_outcome();
            """
        )


@attrs.frozen
class Outcome:
    """One terminal transition logged by the trigger."""

    old_status: str
    old_token: str | None
    new_status: str


@attrs.frozen
class JobRecord:
    """A job as the test reads it back: its row, its executions' (token, attempt) pairs, and its
    terminal transitions."""

    id: int
    kind: str
    status: str
    attempts: int
    max_attempts: int
    last_error: str | None
    executions: tuple[tuple[str, int], ...]
    outcomes: tuple[Outcome, ...]
    history: tuple[str, ...] = ()

    @property
    def tokens(self) -> set[str]:
        return {token for token, _ in self.executions}

    def ended(self, *outcomes: str) -> int:
        """How many of its attempts the history records as ended with one of ``outcomes``."""
        return sum(1 for outcome in self.history if outcome in outcomes)


def leases_of(engine: Engine, schema: str, worker_id: str) -> int:
    """How many jobs of ``schema`` are running under a lease of ``worker_id`` now."""
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                f"SELECT count(*) FROM \"{schema}\".tether_jobs WHERE status = 'running' AND leased_by = %(worker)s",
                {"worker": worker_id},
            ).scalar_one()
        )


def read_jobs(engine: Engine, schema: str) -> dict[int, JobRecord]:
    """Every job of ``schema`` with its executions and terminal transitions, by id."""
    executions: dict[int, list[tuple[str, int]]] = collections.defaultdict(list)
    outcomes: dict[int, list[Outcome]] = collections.defaultdict(list)
    with engine.connect() as conn:
        for job_id, token, attempt in conn.exec_driver_sql(
            f'SELECT job_id, token, attempt FROM "{schema}".chaos_executions ORDER BY at'
        ):
            executions[job_id].append((token, attempt))
        for job_id, old_status, old_token, new_status in conn.exec_driver_sql(
            f'SELECT job_id, old_status, old_token, new_status FROM "{schema}".chaos_outcomes ORDER BY id'
        ):
            outcomes[job_id].append(Outcome(old_status, old_token, new_status))
        rows = conn.exec_driver_sql(
            f"SELECT j.*, payload::jsonb->>'kind' AS kind FROM \"{schema}\".tether_jobs AS j ORDER BY id"
        ).all()
    jobs = {}
    for row in rows:  # read as the repository reads them: a completed attempt kept in the lease columns counts
        job = row_to_job(row)
        jobs[job.id] = JobRecord(
            job.id, row.kind, job.status.value, job.attempts, job.max_attempts, job.last_error,
            tuple(executions.pop(job.id, ())), tuple(outcomes.pop(job.id, ())),
            tuple(attempt.outcome.value for attempt in job.history),
        )
    strays = sorted(set(executions) | set(outcomes))
    assert not strays, f"executions or outcomes of jobs that are not in the table: {strays[:20]}"
    return jobs
