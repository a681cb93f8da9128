"""Run a callback right after a named module finishes importing (or now, if it already has).

Why: verl loads our plugin during ``import verl``, in every process. The pieces we attach to verl's trainer and
FSDP engine live in heavy modules (Ray trainer, FSDP engine) that only some processes import, and importing them
from inside ``verl/__init__`` would be both slow and circular. A meta-path finder lets each process patch exactly
the modules it loads, when it loads them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["when_imported"]

_CALLBACKS: dict[str, list[Callable[[ModuleType], None]]] = {}
_LOCK = threading.Lock()


class _Loader(importlib.abc.Loader):
    def __init__(self, wrapped: Any, name: str) -> None:
        self._wrapped = wrapped
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._wrapped.exec_module(module)
        _fire(self._name, module)

    def __getattr__(self, item: str) -> Any:  # get_source, is_package, ... for tracebacks and tools
        return getattr(self._wrapped, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _CALLBACKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()


def _fire(name: str, module: ModuleType) -> None:
    with _LOCK:
        callbacks = _CALLBACKS.pop(name, [])
    for callback in callbacks:
        callback(module)


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once module `name` is imported: now if it already is, else right after its
    import completes (in this process)."""
    module = sys.modules.get(name)
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False) is False:
        callback(module)
        return
    with _LOCK:
        _CALLBACKS.setdefault(name, []).append(callback)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
