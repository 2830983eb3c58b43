"""Hostile input on the ``tether`` command line (Typer's CliRunner), on a SQLite file: every
command ends with exit code 0, or with 2 and exactly one line ``tether: error: ...`` on stderr and
nothing else; no traceback, no exception out of the command; a refused command changes no job;
and nothing printed holds a control or format character (a stored key with an escape sequence
or a right-to-left override is shown escaped, never sent to the terminal as it is).

Arguments are text, as a shell passes them: hostile strings (lone surrogates, which is how Python
hands over bytes that are not UTF-8, control characters, very long text) and numbers written
every way (huge, negative, ``nan``, ``1e400``, ``0x10``, ``1_000``, with spaces).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import tether
from hypothesis import example, given
from hypothesis import strategies as st
from tether.domain.failure import describe_failure
from tether.entrypoints.cli import app as cli_app
from typer.testing import CliRunner

from tests.fuzz.hostile import budget, hostile_text

STORED_HOSTILE = "k\x1b[2J\x9b31m\u202eevil\n[red]x[/red] [link=http://example.invalid]y[/link]\r"
VARIABLES = ("TETHER_DATABASE_URL", "TETHER_REDIS_URL", "TETHER_SCHEMA", "TETHER_APP", "TETHER_MAX_PAYLOAD_BYTES")


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli_fuzz') / 'jobs.db'}"
    with tether.connect(url) as app:
        first = app.enqueue("fuzz.cli", {"n": 1}, idempotency_key="cli-key").job
        app.cancel(first.id)
        app.enqueue("fuzz.cli", {"n": 2}, queue="q")
        # Stored text a terminal must not take as commands: escape sequences (7- and 8-bit), a
        # right-to-left override, line breaks, and Rich markup, in a key, a payload and a last error.
        hostile = app.enqueue("fuzz.cli", {"s": STORED_HOSTILE}, idempotency_key=STORED_HOSTILE).job
        leased = app.repository.lease_job(hostile.id, worker_id="w", now=app.clock.now(), lease_timeout=60)
        assert leased is not None and leased.lease_token is not None
        app.repository.dead_letter(hostile.id, leased.lease_token, now=app.clock.now(),
                                   error=describe_failure(ValueError(STORED_HOSTILE)))
    yield url


@pytest.fixture(autouse=True, scope="module")
def no_variables() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in VARIABLES:
            patch.delenv(name, raising=False)
        yield


NUMBERS = st.one_of(
    st.integers(-5, 20).map(str),
    st.sampled_from(["1", "2", "3"]),
    st.integers().map(str),
    st.sampled_from(["99999999999999999999999", "-1", "0", "nan", "inf", "-inf", "1e400", "1e15", "0x10", "1_000",
                     " 5 ", "5.5", "", "١٢", "3155760001", "10" + "0" * 5000]),
)
TIMES = st.one_of(
    st.sampled_from(["2026-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-13-01T00:00:00Z",
                     "2026-01-01T00:00:00", "2026-01-01T00:00:00+24:00", "now", "1e9", "2026-01-01T00:00:00.9999999Z"]),
    st.datetimes().map(lambda d: d.isoformat() + "+05:30"),
)
TEXT = st.one_of(hostile_text(), st.sampled_from(["emails.send", "q", "default", "cli-key", "queued", "dead"]))
PAYLOADS = st.one_of(
    TEXT,
    st.sampled_from(['{"s": "\\ud800"}', "[1, NaN]", '{"n": 1' + "0" * 4300 + "}", "1e400", '{"a": {"b": [[[[]]]]}}',
                     '"' + "y" * 70_000 + '"', "[" * 5000 + "]" * 5000, "null", '{"\\u0000": 1}']),
)


def flag(name: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """The flag with a value, or not given (half the time, so that some commands succeed)."""
    return st.one_of(st.just([]), st.just([]), values.map(lambda v: [name, v]))


JOB_TYPES = st.one_of(st.just("emails.send"), st.just("a:b-c_d.e"), TEXT)


def joined(*parts: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    return st.tuples(*parts).map(lambda lists: [arg for part in lists for arg in part])


COMMANDS = st.one_of(
    joined(st.just(["enqueue"]), JOB_TYPES.map(lambda t: [t]), flag("--payload", PAYLOADS), flag("--queue", TEXT),
           flag("--priority", NUMBERS), flag("--max-attempts", NUMBERS), flag("--delay", NUMBERS),
           flag("--run-at", TIMES), flag("--idempotency-key", TEXT)),
    joined(st.just(["jobs", "list"]), flag("--status", TEXT), flag("--queue", TEXT), flag("--limit", NUMBERS),
           flag("--offset", NUMBERS)),
    joined(st.sampled_from([["jobs", "show"], ["jobs", "why"], ["retry"]]), st.one_of(NUMBERS, TEXT).map(lambda v: [v])),
    joined(st.just(["jobs", "cancel"]),
           st.one_of(st.lists(NUMBERS, min_size=1, max_size=3), flag("--key", TEXT),
                     joined(flag("--queue", TEXT), flag("--status", TEXT), flag("--job-type", TEXT)))),
    joined(st.just(["purge"]), flag("--older-than", st.one_of(NUMBERS, TIMES))),
)


def stored(url: str) -> list[tuple[int, str]]:
    with tether.connect(url) as app:
        return [(job.id, job.status.value) for job in app.list(limit=10_000)]


@budget(80)
@given(command=COMMANDS)
@example(command=["enqueue", "x", "--payload", "[" * 5000 + "]" * 5000])  # the parser's own recursion limit
@example(command=["jobs", "show", "3"])  # stored escape sequences and markup
@example(command=["enqueue", "x", "--run-at", "2026-01-01T00:00:00" + "9" * 10_000])
def test_a_command_succeeds_or_prints_one_error_line_exits_2_and_writes_nothing(database: str, command: list[str]) -> None:
    before = stored(database)
    result: Any = CliRunner().invoke(cli_app, [*command, "--database-url", database])
    assert result.exit_code in (0, 2), (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for line in (result.stdout + result.stderr).splitlines():
        assert line.isprintable(), f"a control or format character reached the terminal: {line!r}"
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tether: error: "), result.stderr
        assert result.stdout == ""
        assert stored(database) == before


def _settable(value: str) -> bool:
    """Whether ``value`` can be put in the environment (no NUL; surrogates only as escaped bytes)."""
    try:
        value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


SETTINGS_VARIABLES = st.dictionaries(
    st.sampled_from(["TETHER_POLL_INTERVAL", "TETHER_MAX_PAYLOAD_BYTES", "TETHER_SCHEMA", "TETHER_REDIS_PREFIX",
                     "TETHER_REDIS_CLUSTER", "TETHER_CONCURRENCY", "TETHER_LEASE_TIMEOUT", "TETHER_JOB_TIMEOUT",
                     "TETHER_LOG_LEVEL", "TETHER_QUEUES", "TETHER_PREFETCH"]),
    st.one_of(NUMBERS, TEXT).filter(_settable),
    min_size=1,
    max_size=3,
)


@budget(40)
@example(variables={"TETHER_SCHEMA": "nan"}, command=["jobs", "list"])
@given(variables=SETTINGS_VARIABLES, command=st.sampled_from([["jobs", "list"], ["enqueue", "emails.send"], ["purge", "--older-than", "60"]]))
def test_hostile_tether_variables_are_one_error_line_naming_the_variable(
    database: str, variables: dict[str, str], command: list[str]
) -> None:
    before = stored(database)
    result: Any = CliRunner().invoke(cli_app, [*command, "--database-url", database], env=variables)
    assert result.exit_code in (0, 2), (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for line in (result.stdout + result.stderr).splitlines():
        assert line.isprintable(), line
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tether: error: "), result.stderr
        assert any(name in lines[0] for name in variables) or " (--" in lines[0] or ": --" in lines[0], lines[0]
        assert stored(database) == before
