"""How the ``tether`` command line fails: its exit codes and the one-line error of its root group.

Bad input (a :class:`~tether.domain.errors.TetherError` such as ValidationError,
ConfigurationError, JobNotFound or InvalidTransition, an unparsable ``--payload``, or a flag
Typer rejects) prints one line, ``tether: error: <label>: <problem>``, on stderr and exits with
code 2; nothing is written.  The label names the flag or argument the value came from (see
:mod:`tether.entrypoints.cli.values`).  A server being unreachable (ServiceUnavailable: the store,
or Redis when the app required it) exits with 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from tether.domain.errors import ServiceUnavailable, TetherError
from tether.entrypoints.cli.output import printable
from tether.entrypoints.cli.values import describe_usage_error
from typer.core import TyperGroup

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print ``tether: error: message`` on one line of stderr and exit with ``code``.

    Raises:
        SystemExit: always, with ``code``.
    """
    text = printable(" ".join(str(message).split()))
    print(f"tether: error: {text}", file=sys.stderr)
    sys.exit(code)


class OneLineErrors(TyperGroup):
    """The root command group: every error ends as one line on stderr and an exit code.

    Typer's default draws a box around usage errors; scripts and people both read a single
    ``tether: error: ...`` line better.  Exit codes: 0 done, 1 failed (store unavailable, demo
    not as designed), 2 bad input, 130 interrupted.
    """

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            fail("aborted", 1)
        except ServiceUnavailable as exc:  # the store, or a required Redis
            fail(str(exc), EXIT_UNAVAILABLE)
        except TetherError as exc:
            fail(str(exc))
        except typer.TyperException as exc:  # click's UsageError / BadParameter and friends
            if type(exc).__name__ == "NoArgsIsHelpError":  # `tether` or `tether jobs` alone: show the help
                print(exc.format_message())
                sys.exit(getattr(exc, "exit_code", EXIT_BAD_INPUT))
            fail(describe_usage_error(exc), getattr(exc, "exit_code", EXIT_BAD_INPUT))
        code = result if isinstance(result, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_UNAVAILABLE", "OneLineErrors", "fail"]
