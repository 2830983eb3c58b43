"""Public names of a package loaded on first use: its module ``__getattr__`` and ``__dir__`` (PEP 562).

``tether``, ``tether.testing`` and ``tether.testing.contract`` keep ``import`` cheap this way; without
a ``__dir__`` of their own, ``dir()`` and tab completion would list none of those names until each
had been used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from types import ModuleType
from typing import Any


def lazy_names(
    package: str, namespace: MutableMapping[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's dotted name (``"tether"``).
        namespace: its ``globals()``; a name, once loaded, is stored there, so the next lookup
            is a plain one.
        exports: public name -> dotted name of the module defining it.

    Returns:
        ``__getattr__(name)``, which raises AttributeError for a name not in ``exports``, and
        ``__dir__()``: the exported names (loaded or not) and those of ``__all__``, the module's
        dunders and its loaded public submodules, sorted; not the helpers the package imported
        for itself.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        subpackages = {
            name
            for name, value in namespace.items()
            if isinstance(value, ModuleType) and value.__name__ == f"{package}.{name}" and not name.startswith("_")
        }
        dunders = {name for name in namespace if name.startswith("__") and name.endswith("__")}
        return sorted(set(exports) | set(namespace.get("__all__", ())) | subpackages | dunders)

    return __getattr__, __dir__
