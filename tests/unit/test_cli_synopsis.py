"""The documented command line against the commands themselves.

The synopsis (the block that defines ``STORE`` and ``REDIS``, on the command-line page of the docs)
must name every option each command takes (as its --help lists it) and no option a command lacks,
and spell out every short form next to its long flag.  The synopsis is found wherever it lives in
README.md and docs/ (exactly one such block must exist), so moving it never stops the check.
Every other ``tether ...`` command shown in README.md or docs/ must use only options its command
takes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from tether.entrypoints.cli import app

ROOT = Path(__file__).resolve().parents[2]
#: Where the synopsis lives today; the tests below find it wherever it is.
CLI_PAGE = ROOT / "docs" / "cli.md"
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z-]*|-[A-Za-z])\b")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def documentation() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def synopsis_location() -> tuple[Path, str, str]:
    """(file, synopsis block, the section of that file holding it): the one fenced block of the
    documentation that defines ``STORE = ...``."""
    found = []
    for path in documentation():
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if re.search(r"^STORE = ", match.group(1), flags=re.MULTILINE):
                found.append((path, text, match))
    assert len(found) == 1, f"expected one synopsis block (defining STORE = ...), found {[str(p) for p, _, _ in found]}"
    path, text, match = found[0]
    return path, match.group(1), _section(text, match.start())


def _section(text: str, offset: int) -> str:
    """The part of ``text`` under the heading that precedes ``offset``, up to the next heading of
    the same or a higher level."""
    headings = [(m.start(), len(m.group(1))) for m in re.finditer(r"^(#+) ", text, flags=re.MULTILINE)]
    before = [(start, level) for start, level in headings if start < offset]
    start, level = before[-1] if before else (0, 1)
    ends = [s for s, lvl in headings if s > offset and lvl <= level]
    return text[start:ends[0] if ends else len(text)]


def synopsis_block() -> str:
    return synopsis_location()[1]


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


def _commands() -> dict[str, Any]:
    """Command path -> the click command (``""``: the root)."""
    root = typer.main.get_command(app)
    found: dict[str, Any] = {}

    def visit(command: Any, path: str) -> None:
        children = getattr(command, "commands", None)
        if children is not None and path:
            for name, child in children.items():
                visit(child, f"{path} {name}")
            return
        if children is not None:  # the root: its own options, then its commands
            for name, child in children.items():
                visit(child, name)
        found[path] = command

    visit(root, "")
    return found


def command_flags() -> dict[str, set[str]]:
    """Command path -> the long flags of the real command."""
    return {path: {opt for param in options(command) for opt in param.opts if opt.startswith("--")}
            for path, command in _commands().items()}


def test_the_synopsis_lives_on_the_command_line_page() -> None:
    path, _, _ = synopsis_location()
    assert path == CLI_PAGE


def test_every_command_and_every_option_is_in_the_synopsis() -> None:
    documented = synopsis_flags()
    real = command_flags()
    assert set(documented) == set(real)
    for command, flags in real.items():
        assert documented[command] == flags, (
            f"tether {command}: missing {sorted(flags - documented[command])}, not taken {sorted(documented[command] - flags)}"
        )


def test_every_short_form_is_given_with_its_long_flag() -> None:
    text = synopsis_location()[2]
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


def shown_commands() -> list[tuple[str, str]]:
    """(file name, command line) for every ``tether ...`` line of a code block, and every inline
    code span starting with ``tether ``, in README.md and docs/ (the synopsis block aside)."""
    synopsis = synopsis_block()
    shown = []
    for path in documentation():
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) == synopsis:
                continue
            for line in match.group(1).splitlines():
                if line.lstrip().startswith("tether "):
                    shown.append((path.name, line.split("#", 1)[0].strip()))
        prose = FENCE.sub("", text)
        shown.extend((path.name, span) for span in re.findall(r"`(tether [^`]+)`", prose))
    return shown


def test_every_command_shown_in_the_docs_takes_the_options_it_is_shown_with() -> None:
    commands = _commands()
    shown = shown_commands()
    assert len(shown) > 10
    checked = 0
    for where, line in shown:
        words = line.split()[1:]
        path = ""
        for word in words[:2]:
            candidate = f"{path} {word}".strip()
            if any(name == candidate or name.startswith(candidate + " ") for name in commands if name):
                path = candidate
            else:
                break
        if path not in commands:
            continue  # a group alone (`tether jobs`), or prose naming a command family
        command = commands[path]
        taken = {opt for param in options(command) for opt in param.opts} | {"--help"}
        used = set(FLAG.findall(line))
        assert used <= taken, f"{where}: `{line}`: tether {path} takes no {sorted(used - taken)}"
        checked += 1
    assert checked > 10
