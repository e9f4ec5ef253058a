"""Registries of named plug-ins (methods, judge backends, commands, executors): one lazy loader, one base-class
check and one error message for a name no registry holds.

A registry maps each name to ``"module:Class"`` (or to a tuple whose first item is that, the rest the entry's own
data: a command's help line); the module is imported only when the name is used, so ``adherence --help`` and a
scope job never import a judge. Adding a plug-in is one line in its registry, or ``register`` at run time.

Example:
    >>> from adherence.role import METHODS
    >>> METHODS.load("scope").__name__
    'ScopeMethod'
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Iterable, Iterator, Mapping

from ._errors import OptionError

__all__ = ["Registry", "unknown_name"]


def unknown_name(kind: str, name: str, available: Iterable[str]) -> str:
    """``unknown <kind> 'x'. Did you mean 'y'? Available: a, b, c``.

    Example:
        >>> unknown_name("method", "cosin", ["cosine", "knn"])
        "unknown method 'cosin'. Did you mean 'cosine'? Available: cosine, knn"
    """
    names = list(available)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Available: {', '.join(names)}"


def _split(target: str) -> tuple:
    module, sep, attr = target.partition(":")
    if not (sep and module and attr):
        raise ValueError(f"a registry entry is 'module:Class', got {target!r}")
    return module, attr


class Registry(Mapping[str, Any]):
    """Names of one kind of plug-in, each to ``"module:Class"`` (read as a mapping: ``name in r``, ``list(r)``,
    ``r[name]`` the entry as declared).

    Args:
        kind: what the names are, for errors ("method", "judge backend").
        entries: name -> ``"module:Class"``, or a tuple whose first item is that.
        base: ``"module:Class"`` of the class every entry must subclass (checked on load; "" for none).
    """

    def __init__(self, kind: str, entries: Mapping[str, Any], *, base: str = "") -> None:
        self.kind = kind
        self.base = base
        self._entries: dict = {}
        for name, entry in entries.items():
            self.register(name, entry)

    def __getitem__(self, name: str) -> Any:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"

    def target(self, name: str) -> str:
        """The entry's ``"module:Class"``; an unknown name is an ``OptionError`` naming the close ones."""
        if name not in self._entries:
            raise OptionError(unknown_name(self.kind, name, self._entries))
        entry = self._entries[name]
        return entry if isinstance(entry, str) else entry[0]

    def register(self, name: str, entry: Any) -> None:
        """Add ``name`` (a taken name is refused: ``remove`` it first)."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already ({self.target(name)})")
        _split(entry if isinstance(entry, str) else entry[0])
        self._entries[name] = entry

    def remove(self, name: str) -> None:
        """Forget ``name`` (a plug-in registered for a while, as a test does)."""
        self._entries.pop(name, None)

    def load(self, name: str) -> Any:
        """The class registered under ``name``, imported now; it must subclass ``base``."""
        module, attr = _split(self.target(name))
        cls = getattr(importlib.import_module(module), attr)
        if self.base:
            b_module, b_attr = _split(self.base)
            base = getattr(importlib.import_module(b_module), b_attr)
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"{self.kind} {name!r}: {module}:{attr} is not a {base.__name__}")
        return cls

    def create(self, name: str, *args, **kwargs) -> Any:
        """An instance of the class registered under ``name``."""
        return self.load(name)(*args, **kwargs)
