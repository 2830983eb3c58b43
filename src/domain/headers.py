"""Job headers: a small object of string keys and values stored with a job (its ``headers`` column).

Tether writes them itself: today only the enqueuing trace context (W3C ``traceparent`` and
``tracestate``, when OpenTelemetry tracing is on, see :mod:`tether.entrypoints.observability.tracing`),
so a worker's span can link to the request that enqueued the job.  A job without headers stores
NULL and costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tether.domain.errors import ValidationError

#: Most bytes of a job's headers as UTF-8 JSON text.
HEADERS_MAX_BYTES = 4096


def encode_headers(headers: Mapping[str, str] | None) -> str | None:
    """The canonical JSON text of ``headers`` (keys sorted, compact), or None when empty or None.

    Raises:
        ValidationError (field ``headers``): not a mapping of strings to strings, or more than
            :data:`HEADERS_MAX_BYTES` bytes as JSON.
    """
    if not headers:
        return None
    if not isinstance(headers, Mapping):
        raise ValidationError("headers", f"must be a mapping of strings to strings, got {type(headers).__name__}")
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationError("headers", f"must map strings to strings, got {key!r:.40}: {value!r:.40}")
    text = json.dumps(dict(headers), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8", "surrogatepass")) > HEADERS_MAX_BYTES:
        raise ValidationError("headers", f"must be at most {HEADERS_MAX_BYTES} bytes as JSON")
    return text


__all__ = ["HEADERS_MAX_BYTES", "encode_headers"]
