"""Name -> factory tables: how the project selects environments, credit methods, judges, loss
aggregations and optimizers by the name a config gives.

    ENVS = Registry("environment", field="env.name", load="prover_jax.envs")
    @ENVS.register("household")
    class Household(Env): ...
    ENVS.get("household")          # the factory; ValueError naming the field and the known names
    ENVS.make("household", **kw)   # get(name)(**kw)
    ENVS.names()                   # sorted known names

`load` is a module imported before any lookup (its import registers the built-in members);
`lazy` maps a name to the module that registers it, imported only when that name is asked for
(heavy or optional dependencies). Registering a name twice with a different object is an error.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, *, field: str = "", load: str = "", lazy: dict[str, str] | None = None):
        self.kind, self.field, self._load = kind, field, load
        self._lazy = dict(lazy or {})
        self._table: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: registers the decorated class or function under `name`."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        old = self._table.get(name)
        if old is not None and old is not obj and _qualname(old) != _qualname(obj):
            raise ValueError(f"{self.kind} {name!r} registered twice ({_qualname(old)}, {_qualname(obj)})")
        self._table[name] = obj  # the same definition again (a module reloaded) replaces itself

    def names(self) -> list[str]:
        self._import_builtins()
        return sorted(set(self._table) | set(self._lazy))

    def get(self, name: str) -> T:
        self._import_builtins()
        if name not in self._table and name in self._lazy:
            importlib.import_module(self._lazy[name])
        if name not in self._table:
            where = f" ({self.field})" if self.field else ""
            raise ValueError(f"unknown {self.kind} {name!r}{where}; known: {', '.join(self.names())}")
        return self._table[name]

    def make(self, name: str, *args, **kwargs):
        return self.get(name)(*args, **kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def _import_builtins(self) -> None:
        if self._load:
            importlib.import_module(self._load)


def _qualname(obj) -> tuple[str, str]:
    return getattr(obj, "__module__", ""), getattr(obj, "__qualname__", repr(obj))
