"""Adapters that fail on purpose: a wrapper raising chosen exceptions at chosen calls of chosen methods.

:class:`Faulty` wraps any port (a repository, a dispatcher, a worker registry) and passes every
call through, except that the ``n``-th call of a method named in its plan raises the exception
planned for it (``{"lease": {2: asyncio.CancelledError()}}``: the second ``lease`` raises).  What
it raised is recorded in :attr:`Faulty.raised`, so a test can check that every planned fault was
met.  Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any


class Faulty:
    """Every attribute of ``target``; the planned calls raise instead (see the module docstring).

    Args:
        target: the real adapter.
        plan: method name -> {call number (from 1) -> exception to raise}.

    Attributes:
        calls: method name -> calls so far (planned methods only).
        raised: ``(method, call number, exception type name)`` in the order raised.
    """

    def __init__(self, target: Any, plan: Mapping[str, Mapping[int, BaseException]]) -> None:
        self._target = target
        self._plan = {name: dict(faults) for name, faults in plan.items()}
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.raised: list[tuple[str, int, str]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self._plan or not callable(attr):
            return attr
        return self._wrapped(name, attr)

    def _wrapped(self, name: str, attr: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                n = self.calls[name] = self.calls.get(name, 0) + 1
                fault = self._plan[name].get(n)
                if fault is not None:
                    self.raised.append((name, n, type(fault).__name__))
            if fault is not None:
                raise fault
            return attr(*args, **kwargs)

        return call

    def planned(self) -> list[tuple[str, int, str]]:
        """Every planned fault as ``(method, call number, exception type name)``, sorted."""
        return sorted((name, n, type(exc).__name__) for name, faults in self._plan.items() for n, exc in faults.items())
