"""A bounded map that forgets the least recently used entry first.

The function's caches (parsed fleet items, composed replicas) live across
reconciles in one server process. The server runs requests on a few worker
threads at once (runtime/fn.py), so every operation holds a lock: an entry
another thread evicts between `get`'s lookup and its move would otherwise
raise. Values are immutable records, shared safely once stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def evict_while(self, stale: Callable[[V], bool]) -> None:
        """Forget entries from the least recently used on, while `stale` says so."""
        with self._lock:
            while self._entries:
                key, value = next(iter(self._entries.items()))
                if not stale(value):
                    return
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
