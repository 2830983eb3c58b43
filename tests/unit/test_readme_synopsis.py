"""The README's command-line synopsis against the commands themselves: every option each command
takes (as its --help lists it) is in its synopsis line, and no line lists an option the command
lacks; every short form is spelled out next to its long flag."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from tether.entrypoints.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|-[A-Za-z])\b")


def synopsis_block() -> str:
    section = README.read_text(encoding="utf-8").split("## The command line", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0]


def synopsis_flags() -> dict[str, set[str]]:
    """Command path (``"jobs list"``, ``""`` for ``tether --version``) -> the long flags its
    synopsis entry names, with ``STORE`` and ``REDIS`` expanded."""
    block = synopsis_block()
    groups = {
        name: set(FLAG.findall(text))
        for name, text in re.findall(r"^([A-Z]+) = (.*)$", block, flags=re.MULTILINE)
    }
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        text = line.split("#", 1)[0]
        if text.startswith("tether"):
            words = text.split()[1:]
            command = " ".join(w for w in words[:2] if re.fullmatch(r"[a-z]+", w))
            current = command
            entries[current] = text
        elif text.startswith(" ") and current is not None:
            entries[current] += text
    found = {}
    for command, text in entries.items():
        flags = set(FLAG.findall(text))
        for name, members in groups.items():
            if re.search(rf"\b{name}\b", text):
                flags |= members
        found[command] = flags
    return found


def options(command: Any) -> list[Any]:
    """The command's options (not its arguments), as its --help lists them (--help itself aside)."""
    return [param for param in command.params if param.param_type_name == "option"]


def command_flags() -> dict[str, set[str]]:
    """Command path -> the long flags of the real command."""
    root = typer.main.get_command(app)
    found: dict[str, set[str]] = {}

    def visit(command: Any, path: str) -> None:
        children = getattr(command, "commands", None)
        if children is not None and path:
            for name, child in children.items():
                visit(child, f"{path} {name}")
            return
        if children is not None:  # the root: its own options, then its commands
            for name, child in children.items():
                visit(child, name)
        found[path] = {opt for param in options(command) for opt in param.opts if opt.startswith("--")}

    visit(root, "")
    return found


def test_every_command_and_every_option_is_in_the_synopsis() -> None:
    documented = synopsis_flags()
    real = command_flags()
    assert set(documented) == set(real)
    for command, flags in real.items():
        assert documented[command] == flags, (
            f"tether {command}: missing {sorted(flags - documented[command])}, not taken {sorted(documented[command] - flags)}"
        )


def test_every_short_form_is_given_with_its_long_flag() -> None:
    text = README.read_text(encoding="utf-8").split("## The command line", 1)[1].split("## Configuration", 1)[0]
    root = typer.main.get_command(app)
    pairs = set()

    def visit(command: Any) -> None:
        for child in getattr(command, "commands", {}).values():
            visit(child)
        for param in options(command):
            long = next(opt for opt in param.opts if opt.startswith("--"))
            pairs.update((short, long) for short in param.opts if not short.startswith("--"))

    visit(root)
    assert pairs
    for short, long in sorted(pairs):
        assert f"`{short}` (`{long}`)" in text, (short, long)
