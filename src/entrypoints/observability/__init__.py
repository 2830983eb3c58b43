"""Operators' views of Tether: Prometheus metrics (:mod:`.metrics`), OpenTelemetry traces
(:mod:`.tracing`) and JSON log lines (:mod:`.json_logs`).

Each module imports its optional library (``tether[prometheus]``, ``tether[otel]``) at the top,
so importing Tether never does; only a program that asks for metrics or traces loads them.  They
watch a worker pool through :mod:`tether.entrypoints.worker.observers` and ``enqueue`` through
:mod:`tether.entrypoints.send_observer`: with neither asked for, they cost nothing.
"""
