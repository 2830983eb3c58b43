"""``manage.py tether_worker``: a Tether worker pool running the project's Django tasks.

Options override ``TETHER["WORKER"]`` (keywords of :meth:`tether.Tether.worker`):
``--concurrency N`` (threads), ``--queue NAME`` (repeatable; default: every queue),
``--drain-timeout SECONDS``, ``--stop-when-idle`` (exit once no job it can run is left; for
scripts and tests).  SIGINT/SIGTERM stop it gracefully.  A bad value exits with status 2 and one
line naming it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tether.contrib.django.conf import get_app, tether_settings
from tether.domain.errors import TetherError


class Command(BaseCommand):
    help = "Run a Tether worker pool for this project's Django tasks (stop with Ctrl-C or SIGTERM)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, help="handler threads (default: TETHER['WORKER'] or 4)")
        parser.add_argument("--queue", action="append", dest="queues", help="a queue to serve (repeatable; default: all)")
        parser.add_argument("--drain-timeout", type=float, help="seconds running jobs get to finish at shutdown")
        parser.add_argument("--stop-when-idle", action="store_true", help="exit once no job this worker can run is left")

    def handle(self, *args: Any, **options: Any) -> None:
        worker_options = dict(tether_settings()["WORKER"])
        for name in ("concurrency", "queues", "drain_timeout"):
            if options.get(name) is not None:
                worker_options[name] = options[name]
        try:
            app = get_app()
            pool = app.worker(**worker_options)
        except TypeError as error:
            raise CommandError(f"TETHER['WORKER']: {error}", returncode=2) from None
        except TetherError as error:
            raise CommandError(str(error), returncode=2) from None
        self.stdout.write(f"tether worker {pool.worker_id}: serving {', '.join(worker_options.get('queues') or ['all queues'])}")
        stats = pool.run(stop_when_idle=options["stop_when_idle"])
        self.stdout.write(f"tether worker {pool.worker_id}: stopped ({stats})")
