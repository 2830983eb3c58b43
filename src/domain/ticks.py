"""Tick instants of a periodic schedule: a cron expression in a time zone, or a fixed grid of seconds.

Pure functions of the time passed in (aware UTC in, aware UTC out); no clock is read here.

- ``every`` ticks lie on one grid shared by every process: the multiples of ``every`` seconds
  since the Unix epoch (1970-01-01 00:00 UTC), in whole microseconds.
- Cron expressions (five fields) are evaluated by `cronsim <https://pypi.org/project/cronsim/>`_
  in the schedule's time zone, with Debian cron's daylight-saving rules:

  * an expression at a fixed local time (neither the minute nor the hour field starts with
    ``*``) runs **once** in a repeated hour, at the first occurrence (``30 2 * * *`` in
    Europe/Paris on the last Sunday of October runs at 02:30 CEST, 00:30 UTC, not again at
    02:30 CET); a time that a spring-forward skips runs at the first local minute that exists
    after it (``30 2 * * *`` on the last Sunday of March runs at 03:00 CEST, 01:00 UTC);
  * any other expression (``*/15 * * * *``, ``0 * * * *``) follows elapsed time: it runs in
    both passes of a repeated hour and nothing is run for a skipped one.

:func:`plan_tick` decides which tick a worker enqueues next (the latest missed one within the
catch-up window, else the next one when it is at most :data:`MAX_AHEAD` away); :func:`superseded`
tells when a tick's job still queued has become an older missed tick.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError
from tether.domain.errors import ValidationError, shown
from tether.domain.timeutil import UTC, from_micros, to_micros

#: A tick is enqueued at most this long before its instant (and never more than one tick ahead).
MAX_AHEAD = timedelta(seconds=60)
#: How far back a reverse cron search is widened before walking forward (covers any UTC offset change).
_REWIND = timedelta(hours=3)
#: Most forward steps one search takes (a per-minute expression over 31 days is 44,640).
_MAX_STEPS = 100_000


def zone(name: object, field: str = "tz") -> tzinfo:
    """The time zone called ``name`` (an IANA name such as ``"Europe/Paris"``, or ``"UTC"``).

    Raises:
        ValidationError: naming ``field``: not a string, or no such zone.
    """
    if not isinstance(name, str) or not name:
        raise ValidationError(field, f"must be an IANA time zone name such as 'Europe/Paris', got {shown(name)}")
    if name in ("UTC", "Etc/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError(field, f"{shown(name)} is not a known time zone") from None


def check_cron(expression: object, field: str = "cron") -> str:
    """``expression`` if it is a five-field cron expression that matches at least once.

    Raises:
        ValidationError: naming ``field``, with cronsim's reason.
    """
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise ValidationError(
            field, f"must be a cron expression of five fields (minute hour day month weekday), got {shown(expression)}"
        )
    try:
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        raise ValidationError(field, f"{shown(expression)} does not parse: {shown(str(exc), 200)[1:-1]}") from None
    except StopIteration:
        raise ValidationError(field, f"{shown(expression)} never matches") from None
    return " ".join(expression.split())


@attrs.frozen
class Cadence:
    """When a schedule ticks: ``cron`` in time zone ``tz``, or every ``every_us`` microseconds.

    Exactly one of ``cron`` and ``every_us`` is set (see :func:`cadence`)."""

    cron: str | None
    every_us: int | None
    tz: str = "UTC"

    @property
    def spec(self) -> str:
        """How the cadence reads: ``"cron 0 3 * * *"`` or ``"every 5s"``."""
        if self.cron is not None:
            return f"cron {self.cron}"
        assert self.every_us is not None
        return f"every {self.every_us / 1_000_000:g}s"

    def next_after(self, after: datetime) -> datetime | None:
        """The first tick strictly after ``after`` (aware), in UTC; None if the expression never
        matches again (within cronsim's 50-year horizon)."""
        if self.every_us is not None:
            return from_micros((to_micros(after) // self.every_us + 1) * self.every_us)
        return next(self._cron_from(after), None)

    def latest_at_or_before(self, at: datetime) -> datetime | None:
        """The last tick at or before ``at`` (aware), in UTC; None if there is none."""
        if self.every_us is not None:
            return from_micros(to_micros(at) // self.every_us * self.every_us)
        assert self.cron is not None
        try:  # a quick guess from cronsim's reverse walk, then confirmed walking forward
            guess = next(CronSim(self.cron, at.astimezone(zone(self.tz)) + timedelta(seconds=1), reverse=True))
        except StopIteration:
            return None
        latest = None
        for tick in self._cron_from(min(guess.astimezone(UTC), at) - _REWIND):
            if tick > at:
                break
            latest = tick
        return latest

    def period_after(self, tick: datetime) -> timedelta:
        """The interval from ``tick`` to the tick after it (``every``, or the cron gap there)."""
        following = self.next_after(tick)
        return timedelta(days=36500) if following is None else following - tick

    def _cron_from(self, after: datetime) -> Iterator[datetime]:
        """Cron ticks strictly after ``after``, in UTC, strictly increasing."""
        assert self.cron is not None
        after = after.astimezone(UTC)
        local = after.astimezone(zone(self.tz))
        if local.microsecond:
            local = local.replace(microsecond=0)  # cronsim starts after the whole second
        try:
            for step, found in enumerate(CronSim(self.cron, local)):
                tick = found.astimezone(UTC)
                if tick > after:  # a fixed-time tick in a repeated hour can lie before a fold=1 start
                    after = tick
                    yield tick
                if step > _MAX_STEPS:
                    return
        except StopIteration:  # cronsim gives up after 50 years without a match
            return


def cadence(*, cron: object = None, every: object = None, tz: object = "UTC") -> Cadence:
    """Validate a cadence: ``cron`` (five fields) or ``every`` (seconds, a number >= 1 or a
    timedelta, at most one year, kept to the microsecond), not both; ``tz`` an IANA zone name
    (cron only: ``every`` ticks are UTC instants whatever the zone).

    Raises:
        ValidationError: naming ``cron``, ``every`` or ``tz``; ``cron`` when neither or both are given.
    """
    zone(tz)
    assert isinstance(tz, str)
    if (cron is None) == (every is None):
        raise ValidationError("cron", "give either cron= (a cron expression) or every= (seconds), exactly one of them")
    if cron is not None:
        return Cadence(check_cron(cron), None, tz)
    if isinstance(every, timedelta):
        every = every.total_seconds()
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not (1 <= every <= 366 * 86_400):
        raise ValidationError("every", f"must be a number of seconds from 1 to one year, got {shown(every)}")
    return Cadence(None, round(every * 1_000_000), tz)


def cadence_of(spec: str, tz: str) -> Cadence:
    """The cadence whose :attr:`Cadence.spec` reads ``spec`` in zone ``tz`` (``"cron 0 3 * * *"``,
    ``"every 30s"``): a stored schedule's, read back.  An ``every`` shown with more than six
    significant digits reads back rounded (``every 1.23457e+06s``).

    Raises:
        ValidationError: naming ``spec`` when it reads as neither form, else ``cron``, ``every``
            or ``tz`` as :func:`cadence` does.
    """
    kind, _, rest = spec.partition(" ")
    if kind == "cron":
        return cadence(cron=rest, tz=tz)
    if kind == "every" and rest.endswith("s"):
        try:
            seconds = float(rest[:-1])
        except ValueError:
            seconds = None
        if seconds is not None:
            return cadence(every=seconds, tz=tz)
    raise ValidationError("spec", f"must read 'cron <five fields>' or 'every <seconds>s', got {shown(spec)}")


def plan_tick(
    cad: Cadence, *, last_tick: datetime | None, now: datetime, catch_up: timedelta | None
) -> datetime | None:
    """The tick a worker should enqueue at ``now``, or None (nothing to do yet).

    Args:
        cad: the schedule's cadence.
        last_tick: the last tick enqueued (the stored mark), None for a schedule never ticked.
        now: aware UTC.
        catch_up: how late a missed tick may still run; None means one period (the interval
            from that tick to the one after it, which the latest missed tick is always within).

    Rules: at most one tick ahead (a stored ``last_tick`` after ``now`` means nothing to do); the
    latest tick in ``(last_tick, now]`` runs if it is at most ``catch_up`` old, older missed ticks
    never; otherwise the first tick after ``now`` once it is at most :data:`MAX_AHEAD` away.  A
    schedule never ticked has no missed tick.
    """
    if last_tick is not None and last_tick > now:
        return None
    if last_tick is not None:
        missed = cad.latest_at_or_before(now)
        if missed is not None and missed > last_tick:
            window = cad.period_after(missed) if catch_up is None else catch_up
            if now - missed <= window:
                return missed
    following = cad.next_after(now)
    if following is not None and following - now <= MAX_AHEAD:
        return following
    return None


def superseded(cad: Cadence, *, tick: datetime, now: datetime) -> bool:
    """True when a later tick of ``cad`` than ``tick`` is due at ``now`` (both aware UTC).

    A tick's job still queued then is an older missed tick: it was enqueued ahead before every
    pool stopped, or it waited so long that its successor came due.  Only the latest missed tick
    runs (:func:`plan_tick`), so such a job is cancelled rather than run back to back with it.
    """
    if tick >= now:
        return False
    latest = cad.latest_at_or_before(now)
    return latest is not None and latest > tick


__all__ = ["MAX_AHEAD", "Cadence", "cadence", "cadence_of", "check_cron", "plan_tick", "superseded", "zone"]
