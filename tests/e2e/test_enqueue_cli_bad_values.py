"""``tether enqueue`` as a real process given values no store can hold: bytes that are not UTF-8 on
the command line (Python hands them over as lone surrogates), numbers and times out of range.
Each is one line on stderr naming the flag, exit code 2, no traceback and no database file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_demo import tether_command

pytestmark = pytest.mark.slow

CASES: list[tuple[list[bytes], str]] = [
    ([b"--payload", b'{"s": "caf\xe9"}'],
     "--payload: payload.s holds a lone surrogate (U+DCE9 at index 3), which has no UTF-8 encoding"),
    ([b"--payload", b'{"s": "\\ud800"}'],
     "--payload: payload.s holds a lone surrogate (U+D800 at index 0), which has no UTF-8 encoding"),
    ([b"--idempotency-key", b"order-\xff"],
     "--idempotency-key: holds a lone surrogate (U+DCFF at index 6), which has no UTF-8 encoding"),
    ([b"--queue", b"mail\xff"], "--queue: 'mail\\udcff' is not a queue name"),
    ([b"--payload", b'{"n": 1' + b"0" * 4300 + b"}"], "--payload: holds an integer of more than 4,300 digits"),
    ([b"--delay", b"1e15"], "--delay: must be at most 3,155,760,000 seconds (100 years), got 1e+15"),
    ([b"--run-at", b"9999-12-31T23:00:00-05:00"], "--run-at: 9999-12-31T23:00:00-05:00 is outside the years 1-9999 in UTC"),
]


@pytest.mark.parametrize(("args", "expected"), CASES,
                         ids=["latin-1-payload", "escaped-surrogate", "key-bytes", "queue-bytes", "4301-digits",
                              "delay-1e15", "run-at-9999-at-utc-5"])
def test_one_line_exit_2_and_no_database(tmp_path: Path, args: list[bytes], expected: str) -> None:
    database = tmp_path / "jobs.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(LC_ALL="C.UTF-8", PYTHONIOENCODING="")
    command = [os.fsencode(part) for part in tether_command()]
    result = subprocess.run(  # noqa: PLW1510 - the exit code is asserted
        [*command, b"enqueue", b"emails.send", *args, b"--database-url", os.fsencode(f"sqlite:///{database}")],
        env=env, capture_output=True, timeout=120,
    )
    stderr = result.stderr.decode("utf-8")
    assert result.returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tether: error: {expected}"), stderr
    assert result.stdout == b""
    assert not database.exists()
