"""The ``tether.entrypoints.cli`` package: every command module is registered, the names other
code imports from the package are there, and ``python -m tether.entrypoints.cli`` runs it."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import typer
from tether.entrypoints import cli


def test_every_module_with_commands_is_registered_and_adds_some() -> None:
    """A module holding a ``register`` must be in COMMAND_GROUPS (a forgotten line would drop its
    commands silently), and each registered module adds at least one command."""
    with_register = {
        info.name
        for info in pkgutil.iter_modules(cli.__path__)
        if not info.name.startswith("_") and hasattr(importlib.import_module(f"{cli.__name__}.{info.name}"), "register")
    }
    registered = {module.__name__.rsplit(".", 1)[1] for module in cli.COMMAND_GROUPS}
    assert with_register == registered == {
        "dashboard", "db", "demo", "enqueue", "jobs", "maintenance", "queues", "schedules", "worker", "workers",
    }
    for module in cli.COMMAND_GROUPS:
        scratch = typer.Typer()
        module.register(scratch)
        assert scratch.registered_commands or scratch.registered_groups, module.__name__


def test_the_package_still_offers_what_the_single_module_did() -> None:
    for name in ("app", "main", "job_to_dict", "load_app", "parse_payload", "parse_run_at"):
        assert callable(getattr(cli, name)) or isinstance(getattr(cli, name), typer.Typer), name
    assert (cli.EXIT_UNAVAILABLE, cli.EXIT_BAD_INPUT, cli.EXIT_INTERRUPTED) == (1, 2, 130)


def test_python_dash_m_runs_the_command_line() -> None:
    import tether

    done = subprocess.run(
        [sys.executable, "-m", "tether.entrypoints.cli", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"tether {tether.__version__}"), done.stderr
