"""The one in-memory memo mechanism: keyed by value (structures, content hashes, backends), thread-safe.

Derived systems, compiled right-hand sides and the like are immutable, so a value key is all a memo needs;
nothing is keyed by ``id()`` (ids are reused after garbage collection).  Pure functions of hashable values
use :func:`functools.lru_cache` directly, which is the same idea.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class Memo:
    """``memo.get(key, make)``: the value stored under ``key``, made once by ``make()``."""

    def __init__(self, name: str):
        self.name = name
        self._d: dict = {}
        self._lock = threading.Lock()

    def lookup(self, key) -> Any:
        with self._lock:
            return self._d.get(key)

    def store(self, key, value) -> Any:
        with self._lock:
            return self._d.setdefault(key, value)

    def get(self, key, make: Callable[[], Any]) -> Any:
        hit = self.lookup(key)
        return hit if hit is not None else self.store(key, make())

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)
