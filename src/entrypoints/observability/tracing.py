"""OpenTelemetry traces: a ``send {queue}`` span at enqueue, a ``process {queue}`` span around each
handler, linked through the trace context stored in the job's headers.  Needs ``tether[otel]``
(``opentelemetry-api``); the application installs and configures the SDK and its exporter.

``instrument(app)`` turns it on for one :class:`~tether.entrypoints.service.Tether`: its
``enqueue``/``enqueue_many`` then run inside a ``send`` span (kind PRODUCER) and store the span's
context in each job's headers (injected by the global propagator: W3C ``traceparent`` and
``tracestate`` by default); every worker pool the app builds afterwards wraps each handler in a
``process`` span (kind CONSUMER, current while the handler runs, so the handler's own spans are its
children) with a *link* to the enqueuing ``send`` span, as the messaging semantic conventions
advise for asynchronous consumers: the job may run long after, and in another trace than, the
request that enqueued it.  Without ``instrument`` nothing is injected or started.

Attributes (semantic conventions for messaging): ``messaging.system`` = ``tether``,
``messaging.destination.name`` (the queue), ``messaging.operation.type`` (``send`` or
``process``), ``messaging.operation.name``, ``messaging.message.id`` (the job id; on a send of one
job), ``messaging.batch.message_count`` (a send of several), ``messaging.client.id`` (the worker
id, on process spans); and Tether's own ``tether.job.type``, ``tether.job.attempt`` and
``tether.job.outcome``.  A handler's failure records its exception on the span and sets the status
to ERROR (``error.type`` is the exception's class); a ``Snooze`` is no error.

Cost per job: a process span opens with the attributes the conventions name for sampling
decisions (``messaging.system``, ``messaging.destination.name``, ``messaging.operation.type``,
``messaging.operation.name``); the job's own attributes and the link (which needs the job's
headers parsed) are added only once the span is known to record.  An unsampled job therefore
costs the SDK's sampling decision and a context switch, whatever its headers; a sampler that
decides on links does not see the link (none of the SDK's samplers does).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from tether.domain.errors import ValidationError
from tether.domain.headers import encode_headers
from tether.domain.job import EnqueueResult, Job, NewJob
from tether.domain.snooze import Snooze
from tether.entrypoints.execution import Execution, Outcome

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether
    from tether.entrypoints.worker.observers import PoolView

logger = logging.getLogger("tether.tracing")

#: ``messaging.system`` of every Tether span.
MESSAGING_SYSTEM = "tether"
#: Outcomes whose exception makes the process span's status ERROR.
FAILED_OUTCOMES = (Outcome.RETRYING, Outcome.DEAD)
#: Distinct job headers whose parsed context a tracer keeps (cleared when full).
LINK_CACHE_SIZE = 256
#: Distinct queues whose process-span name and opening attributes a tracer keeps (cleared when full).
OPENING_CACHE_SIZE = 256
_UNPARSED = object()


class _Sending:
    """One enqueue under way (a :class:`~tether.entrypoints.send_observer.Sending`)."""

    def __init__(self, jobs: Sequence[NewJob], span: Span) -> None:
        self.jobs = jobs
        self._span = span

    def stored(self, results: Sequence[EnqueueResult]) -> None:
        if len(results) == 1:
            self._span.set_attribute("messaging.message.id", str(results[0].job.id))
            if not results[0].created:
                self._span.set_attribute("tether.job.created", False)


class TetherTracing:
    """Both observers of tracing: of ``enqueue`` (:meth:`send`) and of a worker pool's jobs
    (:meth:`job_started`, :meth:`handler_returned`).  Made by :func:`instrument`.

    Args:
        tracer_provider: where spans go; default: OpenTelemetry's global provider.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        from tether import __version__

        self._tracer = trace.get_tracer("tether", __version__, tracer_provider=tracer_provider)
        # headers text -> the enqueuing span's context: the jobs of one enqueue_many share one
        # text, so a drain of bulk-enqueued jobs parses each batch's context once.
        self._sent: dict[str, SpanContext | None] = {}
        # queue -> its process spans' name and opening attributes
        self._openings: dict[str, tuple[str, Mapping[str, Any]]] = {}

    # -- enqueue (SendObserver) --------------------------------------------------------------
    @contextmanager
    def send(self, new_jobs: Sequence[NewJob]) -> Iterator[_Sending]:
        """A ``send {queue}`` span (PRODUCER, current) around the write; each job gets its context."""
        queues = sorted({n.queue for n in new_jobs})
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM, "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if len(queues) == 1:
            attributes["messaging.destination.name"] = queues[0]
        if len(new_jobs) > 1:
            attributes["messaging.batch.message_count"] = len(new_jobs)
        if len({n.job_type for n in new_jobs}) == 1:
            attributes["tether.job.type"] = new_jobs[0].job_type
        name = f"send {queues[0]}" if len(queues) == 1 else "send"
        with self._tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes) as span:
            headers = _trace_headers()
            jobs = [attrs.evolve(n, headers_json=headers) for n in new_jobs] if headers else new_jobs
            yield _Sending(jobs, span)

    # -- worker pools (JobObserver) ----------------------------------------------------------
    def pool_started(self, pool: PoolView) -> None:
        """Nothing to do."""

    def job_started(self, job: Job, worker_id: str) -> object:
        """Start the ``process {queue}`` span, linked to the enqueuing span, and make it current.

        The span opens with the attributes a sampler decides on (system, destination, operation:
        one shared mapping per queue).  Only once it is known to record does it get the job's own
        attributes (its id, the worker, its type and attempt) and its link, so an unsampled job
        costs the sampler's decision and its context, not a parse of its headers."""
        opening = self._openings.get(job.queue)
        if opening is None:
            opening = self._opening(job.queue)
        span = self._tracer.start_span(opening[0], kind=SpanKind.CONSUMER, attributes=opening[1])
        if span.is_recording():
            span.set_attributes({
                "messaging.message.id": str(job.id), "messaging.client.id": worker_id,
                "tether.job.type": job.job_type, "tether.job.attempt": job.attempts,
            })
            sent = None if job.headers_json is None else self._sent_by(job)
            if sent is not None:
                span.add_link(sent)
        token = otel_context.attach(trace.set_span_in_context(span))
        return span, token

    def _opening(self, queue: str) -> tuple[str, Mapping[str, Any]]:
        """The name and the sampling attributes of ``queue``'s process spans (kept, read-only)."""
        opening = (f"process {queue}", MappingProxyType({
            "messaging.system": MESSAGING_SYSTEM, "messaging.destination.name": queue,
            "messaging.operation.type": "process", "messaging.operation.name": "process",
        }))
        if len(self._openings) >= OPENING_CACHE_SIZE:
            self._openings.clear()
        self._openings[queue] = opening
        return opening

    def _sent_by(self, job: Job) -> SpanContext | None:
        """The context of the span that enqueued ``job`` (from its headers), None when they hold none."""
        text = job.headers_json
        assert text is not None
        known = self._sent.get(text, _UNPARSED)  # one lookup: another thread may clear the cache
        if known is not _UNPARSED:
            return known  # type: ignore[return-value]
        sent: SpanContext | None = None
        try:
            context = trace.get_current_span(propagate.extract(job.headers)).get_span_context()
        except Exception:  # a header that does not parse costs the link only
            logger.debug("job %s: its trace headers do not parse", job.id, exc_info=True)
        else:
            sent = context if context.is_valid else None
        if len(self._sent) >= LINK_CACHE_SIZE:
            self._sent.clear()
        self._sent[text] = sent
        return sent

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        """End the span: its outcome, and the handler's exception when the attempt failed."""
        assert isinstance(state, tuple)
        span: Span = state[0]
        token: object = state[1]
        try:
            if not span.is_recording():  # not sampled: nothing to add
                return
            if execution is None:
                span.set_status(Status(StatusCode.ERROR, "the worker failed to run the job"))
                return
            span.set_attribute("tether.job.outcome", execution.outcome.value)
            exc = execution.exception
            if exc is not None and not isinstance(exc, Snooze):
                span.record_exception(exc)
                span.set_attribute("error.type", type(exc).__qualname__)
                if execution.outcome in FAILED_OUTCOMES or execution.outcome is Outcome.NOT_RECORDED:
                    span.set_status(Status(StatusCode.ERROR, (execution.error or type(exc).__name__)[:200]))
        finally:
            otel_context.detach(token)  # type: ignore[arg-type]
            span.end()

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        """Nothing: the span ended when the handler returned."""


def _trace_headers() -> str | None:
    """The current context as job headers (the global propagator's fields); only W3C trace
    context when the propagator's fields (baggage, say) would pass the headers' size limit."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    try:
        return encode_headers(carrier)
    except ValidationError:
        carrier = {}
        TraceContextTextMapPropagator().inject(carrier)
        return encode_headers(carrier)


def instrument(app: Tether, *, tracer_provider: trace.TracerProvider | None = None) -> TetherTracing:
    """Trace ``app``'s enqueues and the jobs of every worker pool it builds from now on (see the
    module docstring); returns the tracing observer.  Calling it again replaces the previous one."""
    uninstrument(app)
    tracing = TetherTracing(tracer_provider)
    app.send_observer = tracing
    app.observers.append(tracing)
    return tracing


def uninstrument(app: Tether) -> None:
    """Stop tracing ``app``'s enqueues and the pools it builds from now on (running pools keep
    their observer)."""
    if isinstance(app.send_observer, TetherTracing):
        app.send_observer = None
    app.observers[:] = [o for o in app.observers if not isinstance(o, TetherTracing)]


__all__ = ["MESSAGING_SYSTEM", "TetherTracing", "instrument", "uninstrument"]
