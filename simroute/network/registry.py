"""One helper for the network layer's registries (fabrics, routing strategies): a decorator per registry."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T", bound=type)


def registrar(registry: dict, key: Callable[[type], Hashable], kind: str) -> Callable[[T], T]:
    """A class decorator that files a class in `registry` under `key(cls)`, refusing duplicates."""

    def register(cls: T) -> T:
        name = key(cls)
        if name in registry:
            raise ValueError(f"{kind} {name!r} registered twice")
        registry[name] = cls
        return cls

    return register
