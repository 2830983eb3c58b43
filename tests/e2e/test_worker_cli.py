"""``tether worker`` as a real process: it runs the handlers of the app it is pointed at, and
SIGTERM stops it gracefully (running jobs past the drain deadline go back to the queue)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tether.domain.job import JobStatus
from tether.entrypoints.container import connect

from tests.e2e.test_demo import tether_command

pytestmark = pytest.mark.slow

APP_MODULE = """
import os
import tether

app = tether.connect(os.environ["TETHER_DATABASE_URL"])

@app.handler("note")
def note(payload):
    with open(os.environ["NOTES"], "a") as f:
        f.write(payload["text"] + "\\n")

@app.handler("linger")
def linger(payload, ctx):
    with open(os.environ["NOTES"], "a") as f:
        f.write("lingering\\n")
    ctx.sleep(120)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(
        TETHER_DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.db'}", NOTES=str(tmp_path / "notes.txt"), PYTHONPATH=str(tmp_path)
    )
    return env


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: PLW1510 - callers assert on the exit code
        [*tether_command(), *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _wait_for(predicate, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _notes(tmp_path: Path) -> list[str]:
    path = tmp_path / "notes.txt"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_worker_process_runs_jobs_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "notes_app.py").write_text(APP_MODULE)
    assert _cli(tmp_path, "enqueue", "note", "--payload", json.dumps({"text": "one"})).returncode == 0
    app = connect(_env(tmp_path)["TETHER_DATABASE_URL"])
    try:
        for text in ("two", "three"):
            app.enqueue("note", {"text": text})
        linger_id = app.enqueue("linger", {}).job.id
    finally:
        app.close()

    worker = subprocess.Popen(
        [
            *tether_command(),
            "worker",
            "--app",
            "notes_app:app",
            "--concurrency",
            "2",
            "--drain-timeout",
            "0.5",
            "--log-level",
            "INFO",
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: sorted(_notes(tmp_path)) == ["lingering", "one", "three", "two"], "all four jobs to start")
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, out + err
    # The start line names the store and the dispatcher the app chose (the app decides them).
    assert "store SqliteJobRepository('sqlite:///" in err
    assert "dispatch PollingDispatcher(poll_interval=" in err and "(both chosen by the app notes_app:app)" in err

    app = connect(_env(tmp_path)["TETHER_DATABASE_URL"])
    try:
        assert app.counts()[JobStatus.COMPLETED] == 3
        # The lingering job was still running at the drain deadline: released back to the queue,
        # its attempt given back, ready for the next worker at once.
        lingering = app.get(linger_id)
        assert (lingering.status, lingering.attempts) == (JobStatus.QUEUED, 0)
    finally:
        app.close()


SIGNALLED_AT_CLOSE_APP = """
import atexit
import os
import signal
import tether

app = tether.connect(os.environ["TETHER_DATABASE_URL"])
_close = app.close
_signalled = []


def close():
    # the user presses Ctrl-C again (and a supervisor sends SIGTERM) just as the worker closes
    if not _signalled:
        _signalled.append(True)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    _close()


app.close = close
# and once more while the interpreter shuts down
atexit.register(os.kill, os.getpid(), signal.SIGTERM)
"""


def test_a_signal_while_a_cleanly_stopped_worker_closes_does_not_kill_it(tmp_path: Path) -> None:
    (tmp_path / "closing_app.py").write_text(SIGNALLED_AT_CLOSE_APP)
    done = _cli(tmp_path, "worker", "--app", "closing_app:app", "--until-idle", "--log-level", "INFO")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGTERM received while closing connections after a clean stop; finishing" in done.stderr
