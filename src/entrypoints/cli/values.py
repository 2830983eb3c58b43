"""Option values of the ``tether`` command line, and the label its bad-input messages start with.

Every bad value the CLI reports is one line, ``tether: error: <label>: <problem>``, where the
label names what the user gave, as they gave it:

* an option: its flag, ``--older-than`` (or its variable, ``TETHER_APP``, when the value came
  from the environment);
* an argument: its name in the usage line, ``JOB_TYPE``;
* an option backed by a setting (:mod:`tether.entrypoints.settings`): the setting, its flag and
  its variable, ``concurrency (--concurrency, TETHER_CONCURRENCY)``, as
  :class:`~tether.entrypoints.settings.InvalidSetting` words it.

The parsers below are Typer ``parser=`` callables that word their own problems (Typer's default
conversion words them as pydantic does, and differently from one Typer release to the next):
each raises :class:`typer.BadParameter` with the problem alone, Typer attaches the parameter,
and :func:`describe_usage_error` puts the label in front.  :class:`FlagNamingCommand` does the same
for a :class:`~tether.domain.errors.ValidationError` raised inside a command, whose ``field`` is a
Python name (``older_than``) the user never typed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

import attrs
import typer
from tether.domain.errors import ValidationError
from tether.domain.validation import validate_seconds
from tether.entrypoints.settings import SWITCH_WORDS, Settings, env_name, parse_switch, setting_label
from typer.core import TyperCommand

E = TypeVar("E", bound=Enum)

_SETTINGS = frozenset(field.name for field in attrs.fields(Settings))


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """A parser of whole numbers in ``[low, high]`` (either end open when None).

    The parser raises typer.BadParameter: ``must be an integer, got 'abc'`` or
    ``must be an integer from 1 to 10,000, got 0``.
    """
    if low is not None and high is not None:
        wanted = f"an integer from {low:,} to {high:,}"
    elif low is not None:
        wanted = f"an integer >= {low:,}"
    elif high is not None:
        wanted = f"an integer <= {high:,}"
    else:
        wanted = "an integer"

    def parse(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise typer.BadParameter(f"must be {wanted}, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise typer.BadParameter(f"must be {wanted}, got {value}")
        return value

    return parse


def number_of_seconds(text: str) -> float:
    """Parse a number of seconds (any float; the setting it feeds checks its range).

    Raises typer.BadParameter: ``must be a number of seconds, got 'soon'``.
    """
    try:
        return float(str(text).strip())
    except ValueError:
        raise typer.BadParameter(f"must be a number of seconds, got {text!r}") from None


def seconds(*, allow_zero: bool = True) -> Callable[[str], float]:
    """A parser of durations: a finite number of seconds, >= 0 (> 0 unless ``allow_zero``).

    The parser raises typer.BadParameter with the problem
    :func:`~tether.domain.validation.validate_seconds` states (``must be >= 0 seconds, got -5.0``).
    """

    def parse(text: str) -> float:
        try:
            return validate_seconds(number_of_seconds(text), "seconds", allow_zero=allow_zero)
        except ValidationError as error:
            raise typer.BadParameter(error.problem) from None

    return parse


def switch(text: str | bool) -> bool:
    """Parse an on/off value (a switch's environment variable; the flag itself gives True).

    Raises typer.BadParameter: ``must be 1/0, true/false, yes/no or on/off, got 'maybe'``.
    """
    if isinstance(text, bool):
        return text
    try:
        return parse_switch(str(text))
    except ValueError:
        raise typer.BadParameter(f"must be {SWITCH_WORDS}, got {text!r}") from None


def choice(enum_type: type[E]) -> Callable[[str], E]:
    """A parser of one member of a text-valued enum, by value, ignoring case.

    The parser raises typer.BadParameter: ``must be one of queued, running, ..., got 'bogus'``.
    """
    by_value = {str(member.value).casefold(): member for member in enum_type}

    def parse(text: str) -> E:
        member = by_value.get(str(text).strip().casefold())
        if member is None:
            raise typer.BadParameter(f"must be one of {', '.join(by_value)}, got {text!r}")
        return member

    return parse


def long_flag(param: Any) -> str:
    """The option's long flag (``--limit`` rather than ``-n``); its first one if it has no long one."""
    return next((opt for opt in param.opts if opt.startswith("--")), param.opts[0])


def option_label(param: Any, ctx: Any = None) -> str:
    """What a message about ``param``'s value starts with (see the module docstring).

    Args:
        param: the click/Typer parameter.
        ctx: its context, to tell a value from the environment; None names the flag.
    """
    if param.param_type_name == "argument":
        return param.metavar or param.name.upper()
    if param.name in _SETTINGS and param.envvar == env_name(param.name):
        return setting_label(param.name)
    source = ctx.get_parameter_source(param.name) if ctx is not None else None
    if source is not None and source.name == "ENVIRONMENT" and isinstance(param.envvar, str):
        return param.envvar
    return long_flag(param)


def describe_usage_error(error: Exception) -> str:
    """The one-line message of a usage error Typer raised: ``<label>: <problem>`` for a bad,
    missing or unknown option or argument, ``<name>: no such command ...`` for an unknown command
    (naming the group's commands); Typer's own words for anything else."""
    param = getattr(error, "param", None)
    kind = type(error).__name__
    if param is not None:
        label = option_label(param, getattr(error, "ctx", None))
        if kind == "MissingParameter":
            envvar = getattr(param, "envvar", None)
            return f"{label}: is required" + (f" (or set {envvar})" if isinstance(envvar, str) else "")
        return f"{label}: {getattr(error, 'message', error)}"
    if kind == "NoSuchOption":
        guesses = sorted(getattr(error, "possibilities", None) or ())
        return f"{error.option_name}: no such option" + (f" (did you mean {' or '.join(guesses)}?)" if guesses else "")  # type: ignore[attr-defined]
    message = str(error.format_message())  # type: ignore[attr-defined]
    ctx = getattr(error, "ctx", None)
    if message.startswith("Got unexpected extra argument") and ctx is not None:
        return _extra_arguments(message, ctx)
    unknown = _NO_SUCH_COMMAND.match(message)
    if unknown is not None and ctx is not None:
        return _no_such_command(unknown, ctx)
    return message


#: Click's "No such command 'x'." (the name as Python's repr), with Typer's "Did you mean 'y', 'z'?"
_NO_SUCH_COMMAND = re.compile(r"No such command (?P<name>'[^']*'|\"[^\"]*\")\.?(?:\s*Did you mean (?P<guesses>.*)\?)?\s*$", re.DOTALL)


def _no_such_command(found: re.Match[str], ctx: Any) -> str:
    """``frobnicate: no such command of tether jobs (commands: cancel, list, show, why)``, with
    ``did you mean list?`` first when Typer found close names: Click's "No such command
    'frobnicate'." said where, and with the group's commands."""
    name = ast.literal_eval(found.group("name"))
    group = ctx.command
    commands = sorted(
        command_name for command_name in group.list_commands(ctx)
        if not getattr(group.get_command(ctx, command_name), "hidden", False)
    )
    guesses = [guess for guess in re.findall(r"'([^']*)'", found.group("guesses") or "") if guess in commands]
    where = f" of {ctx.command_path}" if ctx.parent is not None else ""
    hint = f"did you mean {' or '.join(guesses)}? " if guesses else ""
    return f"{name}: no such command{where} ({hint}commands: {', '.join(commands)})"


#: Options every store-reading command takes: left out of the hint about a command's own options.
STORE_FLAGS = frozenset({"--database-url", "--schema", "--redis-url", "--redis-prefix", "--redis-cluster"})


def _extra_arguments(message: str, ctx: Any) -> str:
    """``0: unexpected argument of tether queues limit (values go with its options: --max-running,
    ...)``: Typer's "Got unexpected extra argument(s) (0)" said where and what instead."""
    found = re.search(r"\(([^()]*)\)\s*$", message)
    extra = found.group(1) if found else message
    options = [
        opt for param in ctx.command.params
        if getattr(param, "param_type_name", "") == "option" and not getattr(param, "is_flag", False)
        for opt in param.opts if opt.startswith("--") and opt not in STORE_FLAGS and opt != "--help"
    ]
    plural = "s" if " " in extra.strip() else ""
    hint = f" (values go with its options: {', '.join(options)})" if options else ""
    return f"{extra}: unexpected argument{plural} of {ctx.command_path}{hint}"


def _field_head(field: str) -> str:
    """``payload[3].name`` -> ``payload``."""
    return re.split(r"[.\[]", field, maxsplit=1)[0]


def _param_named(ctx: Any, name: str) -> Any:
    """The parameter of ``ctx``'s command that a domain field ``name`` is about: the one with
    that Python name, or whose long flag spells it (``app`` is ``--app``); None if none is."""
    for param in ctx.command.params:
        flags = {opt[2:].replace("-", "_") for opt in getattr(param, "opts", ()) if opt.startswith("--")}
        if name == param.name or name in flags:
            return param
    return None


class FlagNamingCommand(TyperCommand):
    """A Typer command whose :class:`ValidationError` about one of its parameters is reported
    under that parameter's label (``--older-than: ...``, not ``older_than: ...``).

    The error becomes a :class:`typer.BadParameter` for the parameter; a sub-field keeps its path
    (``--payload: payload[1] is nan; ...``).  Errors about anything else pass through unchanged.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ValidationError as error:
            param = _param_named(ctx, _field_head(error.field))
            if param is None:
                raise
            problem = error.problem if error.field == _field_head(error.field) else f"{error.field} {error.problem}"
            raise typer.BadParameter(problem, ctx=ctx, param=param) from None


__all__ = [
    "FlagNamingCommand",
    "choice",
    "describe_usage_error",
    "integer",
    "long_flag",
    "number_of_seconds",
    "option_label",
    "seconds",
    "switch",
]
