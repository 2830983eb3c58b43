"""Hostile input to ``app.periodic`` (memory and SQLite), to ``tether enqueue`` with a key in
Tether's reserved namespace, and to ``tether schedules list``.

A schedule is registered whole or refused with a :class:`~tether.domain.errors.ValidationError`
naming one of the call's fields; a refused call registers nothing (``app.periodic_schedules``) and
writes nothing (``app.schedules()`` and the stored jobs unchanged).  On the command line a refused
command prints one ``tether: error: ...`` line, exits 2 and changes no job.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import tether
from hypothesis import example, given
from hypothesis import strategies as st
from tether import TetherError
from tether.domain.errors import ValidationError
from tether.domain.schedules import RESERVED_KEY_PREFIX
from tether.entrypoints.cli import app as cli_app
from tether.entrypoints.service import Tether
from typer.testing import CliRunner

from tests.fuzz.hostile import (
    FLOATS,
    FUZZ,
    HUGE_INTS,
    anything,
    budget,
    durations_and_worse,
    hostile_text,
    integers_and_worse,
    payloads,
)
from tests.fuzz.stores import StatementLog, open_app, stored

HUGE = 10**5000
PERIODIC_FIELDS = ("name", "job_type", "cron", "every", "tz", "payload", "queue", "priority", "catch_up", "overlap")


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tether]:
    with open_app(request.param, tmp_path_factory.mktemp(f"periodic_{request.param}"), StatementLog()) as app:
        app.enqueue("fuzz.periodic", {"n": 1})
        yield app


def good_or(hostile: st.SearchStrategy[Any], good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value most of the time, so that each call has a few bad fields, not all of them."""
    return st.one_of(good, good, hostile)


CRONS = st.one_of(
    hostile_text(),
    anything(),
    st.sampled_from(
        ["* * * * * *", "0 0 * * * *", "0 3 * * *", "*/0 * * * *", "60 * * * *", "0 24 * * *", "0 0 31 2 *",
         "0 0 30 2 *", "99999999999999999999 * * * *", "-1 * * * *", "0 0 0 * *", "0 0 * 13 *", "0 0 * * 8",
         "@daily", "@reboot", "* * * *", "", "     ", "\u2028* * * * *", "١ * * * *", "0\u00a00 * * *",
         "0 0 L * *", "0 0 * * 5L", "0 0 * * 1#6", "0 0 LW * *", "1-0 * * * *", "*/99999999999999 * * * *",
         "0 0 1,2,3," + "4," * 5000 + "5 * *", "\x00 * * * *", "\ud800 * * * *", "0 0 * JAN-DEC MON-SUN",
         "0 0 ? * ?", "H * * * *"]
    ),
)
ZONE_NAMES = st.one_of(
    hostile_text(),
    anything(),
    st.sampled_from(
        ["UTC", "Etc/UTC", "Europe/Paris", "America/St_Johns", "Pacific/Kiritimati", "../etc", "../../etc/passwd",
         "/etc/localtime", "Europe/../UTC", "America", "", " ", "utc", "Europe/Paris\x00", "\ud800", "GMT+5",
         "Etc/GMT-14", "Europe/Nowhere", "x" * 10_000, "Europe/Paris/", "./UTC", "posixrules", "zone.tab",
         "tzdata.zi", "__init__.py", "Factory", "localtime", "EST5EDT"]
    ),
)
EVERY = st.one_of(
    durations_and_worse(),
    FLOATS,
    HUGE_INTS,
    st.sampled_from([0, 0.999999, 1, 1.0000001, True, False, math.nan, math.inf, -math.inf, 366 * 86_400,
                     366 * 86_400 + 1, timedelta(microseconds=999_999), timedelta.max, timedelta.min, HUGE, -HUGE]),
)
NAMES = st.one_of(
    hostile_text(),
    anything(),
    st.sampled_from(["n" * 200, "n" * 201, "t" * 255, "t" * 256, "a:b-c_d.e", "tether:tick:x", "é"]),
)

ARGUMENTS = st.fixed_dictionaries(
    {
        "name": good_or(NAMES, st.from_regex(r"s-[a-z0-9]{1,8}", fullmatch=True)),
        "job_type": good_or(NAMES, st.sampled_from(["fuzz.job", "a:b-c_d.e"])),
    },
    optional={
        "cron": good_or(CRONS, st.sampled_from(["0 3 * * *", "*/15 * * * *", "30 2 * * 0"])),
        "every": good_or(EVERY, st.sampled_from([1, 60, 2.5, timedelta(hours=1)])),
        "tz": good_or(ZONE_NAMES, st.sampled_from(["UTC", "Europe/Paris"])),
        "payload": good_or(payloads(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
        "queue": good_or(st.one_of(hostile_text(), anything()), st.sampled_from(["default", "q-1.x"])),
        "priority": good_or(integers_and_worse(), st.integers(-10, 10)),
        "catch_up": good_or(st.one_of(durations_and_worse(), anything()), st.sampled_from([None, 0, 60, timedelta(days=31)])),
        "overlap": good_or(st.one_of(anything(), st.just(HUGE)), st.booleans()),
    },
)


def state(app: Tether) -> tuple[dict[str, Any], list[Any], int]:
    """What a refused call must not change: the registered schedules, the stored ones, the jobs."""
    return dict(app.periodic_schedules), app.schedules(), stored(app)


@FUZZ
@given(arguments=ARGUMENTS)
@example(arguments={"name": "s-huge", "job_type": "fuzz.job", "every": HUGE})  # found: no repr past 4,300 digits
@example(arguments={"name": "s-huge", "job_type": "fuzz.job", "cron": HUGE})
@example(arguments={"name": "s-huge", "job_type": "fuzz.job", "every": 60, "tz": HUGE})
@example(arguments={"name": "s-huge", "job_type": "fuzz.job", "every": 60, "catch_up": HUGE})
@example(arguments={"name": "s-huge", "job_type": "fuzz.job", "every": 60, "catch_up": -HUGE})
@example(arguments={"name": "s-huge", "job_type": "fuzz.job", "every": 60, "overlap": HUGE})
@example(arguments={"name": "s-six", "job_type": "fuzz.job", "cron": "0 0 * * * *"})
@example(arguments={"name": "s-zone", "job_type": "fuzz.job", "cron": "0 3 * * *", "tz": "../etc"})
def test_a_schedule_is_registered_whole_or_refused_naming_its_field(app: Tether, arguments: dict[str, Any]) -> None:
    before = state(app)
    try:
        schedule = app.periodic(**arguments)
    except TetherError as error:
        assert isinstance(error, ValidationError), repr(error)
        assert error.field.split(".", 1)[0].split("[", 1)[0] in PERIODIC_FIELDS, error.field
        assert str(error) and "\n" not in str(error) and len(str(error)) < 2_000, repr(str(error))[:300]
        assert state(app) == before
    else:
        registered, in_store, jobs = before
        if arguments["job_type"] is None:  # the decorator form: nothing registered until it decorates
            assert callable(schedule) and state(app) == before
            return
        assert app.periodic_schedules[schedule.name] is schedule
        assert len(app.periodic_schedules) == len(registered) + 1
        assert (app.schedules(), stored(app)) == (in_store, jobs)  # registering writes nothing
        assert schedule.catch_up is None or timedelta(0) <= schedule.catch_up <= timedelta(days=31)
        every = schedule.cadence.every_us
        assert every is None or 1_000_000 <= every <= 366 * 86_400 * 1_000_000


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('periodic_cli') / 'jobs.db'}"
    with tether.connect(url) as app:
        app.enqueue("fuzz.cli", {"n": 1}, idempotency_key="cli-key")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("TETHER_DATABASE_URL", "TETHER_SCHEMA", "TETHER_APP"):
            patch.delenv(name, raising=False)
        yield url


def jobs_in(url: str) -> list[tuple[int, str, str | None]]:
    with tether.connect(url) as app:
        return [(job.id, job.status.value, job.idempotency_key) for job in app.list(limit=10_000)]


def run_cli(url: str, command: list[str]) -> Any:
    result: Any = CliRunner().invoke(cli_app, [*command, "--database-url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


RESERVED_KEYS = st.one_of(
    st.sampled_from(["tether:", "tether:tick:", "tether:tick:nightly:0", "tether:tick:x:" + "9" * 5000, "tether:\ud800"]),
    hostile_text(20).map(lambda rest: RESERVED_KEY_PREFIX + rest),
)


@budget(25)
@given(key=RESERVED_KEYS)
def test_enqueue_with_a_reserved_key_is_one_error_line_naming_the_key(database: str, key: str) -> None:
    before = jobs_in(database)
    result = run_cli(database, ["enqueue", "fuzz.cli", "--idempotency-key", key])
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tether: error: ") and "idempotency" in lines[0], result.stderr
    assert result.stdout == ""
    assert jobs_in(database) == before


def test_the_api_refuses_a_reserved_key_as_the_cli_does(tmp_path: Any) -> None:
    with tether.connect("memory://") as app:
        with pytest.raises(ValidationError) as refused:
            app.enqueue("fuzz.api", idempotency_key="tether:tick:nightly:0")
        assert refused.value.field == "idempotency_key" and stored(app) == 0


OPTIONS = st.lists(
    st.one_of(
        st.sampled_from(["--json", "--status", "--limit", "-n", "--all", "--name", "--", "-", "--json=yes",
                         "--schema", "--database-url", "--help-me", "-x"]),
        hostile_text(20).filter(lambda v: v != "--help"),
    ),
    min_size=1,
    max_size=3,
)


@budget(25)
@given(options=OPTIONS)
@example(options=["--schema", "nan"])
@example(options=["--status", "queued"])
def test_schedules_list_with_bad_options_is_one_error_line_and_exit_2(database: str, options: list[str]) -> None:
    before = jobs_in(database)
    result = run_cli(database, ["schedules", "list", *options])
    assert result.exit_code in (0, 2), (result.exit_code, result.output)
    for line in (result.stdout + result.stderr).splitlines():
        assert line.isprintable(), line
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tether: error: "), result.stderr
        assert result.stdout == ""
    assert jobs_in(database) == before
