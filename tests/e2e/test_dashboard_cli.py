"""``tether dashboard`` as a person starts it: refused without credentials, served with them (HTTP
Basic from TETHER_DASHBOARD_PASSWORD), and served without them only on 127.0.0.1 with --no-auth."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import tether

TETHER = [sys.executable, "-m", "tether.entrypoints.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")} | env
    return subprocess.run(TETHER + args, capture_output=True, text=True, timeout=60, env=environment, check=False)


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    with tether.connect(url) as app:
        app.enqueue("reports.build", {"quarter": "Q3"})
    return url


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "tether: error: the dashboard needs credentials: give --password or set TETHER_DASHBOARD_PASSWORD"),
        (["--password", ""], {}, "give --password or set TETHER_DASHBOARD_PASSWORD"),
        (["--no-auth", "--host", "0.0.0.0"], {}, "tether: error: --no-auth: serves on 127.0.0.1 only"),
        (["--no-auth"], {"TETHER_DASHBOARD_PASSWORD": "pw"}, "--no-auth: cannot be combined with --password"),
        (["--port", "70000"], {"TETHER_DASHBOARD_PASSWORD": "pw"}, "--port: must be an integer from 1 to 65,535"),
    ],
)
def test_it_refuses_to_start_without_credentials_in_one_line(
    database: str, args: list[str], env: dict[str, str], expected: str
) -> None:
    done = run(["dashboard", "--database-url", database, *args], **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and expected in done.stderr
    assert done.stdout == ""


@contextmanager
def serving(args: list[str], **env: str) -> Iterator[str]:
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")} | env
    process = subprocess.Popen(
        TETHER + ["dashboard", "--port", str(port), *args], env=environment, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert process.poll() is None, process.communicate()[0]
                time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_it_serves_the_store_behind_http_basic(database: str) -> None:
    with serving(["--database-url", database, "--user", "ops"], TETHER_DASHBOARD_PASSWORD="pw-from-env") as base:
        status, body = get(f"{base}/jobs")
        assert status == 401 and "Q3" not in body
        assert get(f"{base}/jobs", ("ops", "wrong"))[0] == 401
        status, body = get(f"{base}/jobs/1", ("ops", "pw-from-env"))
        assert status == 200 and "Q3" in body
        assert "pw-from-env" not in body and database not in body


def test_no_auth_serves_on_loopback_without_credentials(database: str) -> None:
    with serving(["--database-url", database, "--no-auth", "--read-only"]) as base:
        status, body = get(f"{base}/jobs")
        assert status == 200 and "reports.build" in body and "read-only" in body


def test_a_port_in_use_is_one_line_naming_it(database: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run(["dashboard", "--database-url", database, "--port", str(port)], TETHER_DASHBOARD_PASSWORD="pw")
    assert done.returncode == 2
    assert done.stderr.startswith(f"tether: error: --port: cannot listen on 127.0.0.1:{port}") and done.stderr.count("\n") == 1
