"""``tether worker`` with ``--log-format json``, ``--log-jobs`` and ``--metrics-port`` as a real
process: one JSON object per stderr line with the job's fields, metrics served while it runs, and a
port in use refused in one line naming the flag."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from tether.entrypoints.container import connect

from tests.e2e.test_demo import tether_command

pytestmark = pytest.mark.slow

APP_MODULE = """
import logging
import os
import time
import tether

app = tether.connect(os.environ["TETHER_DATABASE_URL"])

@app.handler("greet")
def greet(payload):
    logging.getLogger("greetings").info("hello %s", payload["name"])

@app.handler("wait")
def wait(payload, ctx):
    ctx.sleep(float(payload["seconds"]))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(TETHER_DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.db'}", PYTHONPATH=str(tmp_path))
    return env


def _worker(tmp_path: Path, *args: str) -> list[str]:
    return [*tether_command(), "worker", "--app", "obs_app:app", *args]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_json_log_lines_carry_the_job_fields_and_job_lines_are_opt_in(tmp_path: Path) -> None:
    (tmp_path / "obs_app.py").write_text(APP_MODULE)
    app = connect(_env(tmp_path)["TETHER_DATABASE_URL"])
    try:
        job = app.enqueue("greet", {"name": "Ada"}).job
    finally:
        app.close()
    done = subprocess.run(  # noqa: PLW1510 - asserted below
        _worker(tmp_path, "--until-idle", "--log-format", "json", "--log-jobs", "--worker-id", "w-json"),
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    fields = {"job_id": job.id, "job_type": "greet", "queue": "default", "attempt": 1, "worker_id": "w-json"}
    own = next(line for line in lines if line["logger"] == "greetings")
    assert own["message"] == "hello Ada" and {k: own[k] for k in fields} == fields
    job_lines = [line for line in lines if line["logger"] == "tether.jobs"]
    assert [line["message"].split(" in ")[0] for line in job_lines] == [
        f"job {job.id} (greet) started, attempt 1/3", f"job {job.id} (greet) completed"]
    assert all({k: line[k] for k in fields} == fields for line in job_lines)
    assert job_lines[1]["outcome"] == "completed" and job_lines[1]["duration_seconds"] >= 0
    start = next(line for line in lines if "starting" in line["message"])
    assert "job_id" not in start


def test_metrics_are_served_while_the_worker_runs(tmp_path: Path) -> None:
    (tmp_path / "obs_app.py").write_text(APP_MODULE)
    app = connect(_env(tmp_path)["TETHER_DATABASE_URL"])
    try:
        app.enqueue("greet", {"name": "Ada"})
        app.enqueue("wait", {"seconds": 30})  # keeps the worker busy while it is scraped
    finally:
        app.close()
    port = _free_port()
    worker = subprocess.Popen(
        _worker(tmp_path, "--metrics-port", str(port), "--drain-timeout", "0"), cwd=tmp_path, env=_env(tmp_path),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        body = ""
        while 'tether_jobs_completed_total{job_type="greet",queue="default"} 1.0' not in body:
            assert time.monotonic() < deadline, f"no completed greet in the metrics: {body[-2000:]}"
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    body = response.read().decode()
            except OSError:
                continue
        assert "tether_worker_jobs_in_flight 1.0" in body  # the waiting job, leased with the first
        assert "tether_queue_depth" not in body  # store-wide gauges are not every worker's job

        taken = subprocess.run(  # noqa: PLW1510 - asserted below
            _worker(tmp_path, "--metrics-port", str(port)), cwd=tmp_path, env=_env(tmp_path), capture_output=True,
            text=True, timeout=60, stdin=subprocess.DEVNULL,
        )
        assert taken.returncode == 2
        error_lines = [line for line in taken.stderr.splitlines() if line.startswith("tether: error:")]
        assert len(error_lines) == 1 and "--metrics-port" in error_lines[0] and "in use" in error_lines[0]
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def test_a_bad_log_format_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    (tmp_path / "obs_app.py").write_text(APP_MODULE)
    done = subprocess.run(  # noqa: PLW1510 - asserted below
        _worker(tmp_path, "--log-format", "xml"), cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--log-format" in done.stderr and "xml" in done.stderr
