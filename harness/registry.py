"""One registry for every kind of plug-in: training methods, benchmark suites, metrics.

A :class:`Registry` maps names to objects (classes, or metric kinds) and finds them in three
ways, lazily on the first lookup or listing:

* **built-ins**, given as *module names* (strings): ``Registry("method", builtins=("methods",))``
  imports every public module of the package ``methods``, whose decorators register
  themselves.  Strings keep the engine free of static imports of its plug-ins.
* **entry points** of installed distributions in the group ``retrieval_harness.<kind>s``
  (``retrieval_harness.methods``, ``retrieval_harness.suites``, ``retrieval_harness.metrics``);
  an entry point names an object (``pkg.mod:Class``) registered under the entry point's name,
  or a module whose decorators register what it defines.
* **references** ``package.module:Class`` given where a name is expected (e.g. in a suite
  file), so a class in the user's own package works without any registration.

A name registered twice by two different definitions is refused, naming both; an unknown
name is refused with the closest known names.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import logging
import pkgutil
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from harness.errors import ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")

ENTRY_POINT_PREFIX = "retrieval_harness."


def qualified_name(obj: Any) -> str:
    """``module:QualName`` of a class or function (how duplicates and references are named); an
    object that is neither names its definition through an ``origin`` attribute (a metric's function)."""
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        origin = getattr(obj, "origin", None)
        obj = origin if origin is not None else type(obj)
    return f"{obj.__module__}:{obj.__qualname__}"


def describe(obj: Any) -> str:
    """One line about ``obj``: its ``description`` attribute, else the first line of its docstring."""
    text = getattr(obj, "description", "") or inspect.getdoc(obj) or ""
    return text.strip().splitlines()[0] if text.strip() else ""


def resolve_reference(reference: str, what: str = "object") -> Any:
    """Import ``package.module:Attr.Sub`` and return the attribute (ConfigError naming the problem)."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"bad {what} reference {reference!r}: expected 'package.module:Name'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} reference {reference!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what} reference {reference!r}: module {module_name!r} has no {attr!r}") from None
    return obj


class Registry(Generic[T]):
    """Names -> objects of one ``kind`` ("method", "suite", "metric"), with lazy discovery."""

    def __init__(self, kind: str, *, builtins: Iterable[str] = (), group: str | None = None,
                 check: Callable[[Any], bool] | None = None,
                 on_register: Callable[[str, Any], None] | None = None) -> None:
        self.kind = kind
        self.group = group if group is not None else f"{ENTRY_POINT_PREFIX}{kind}s"
        self._builtins = tuple(builtins)
        self._check = check
        self._on_register = on_register   # e.g. sets ``cls.name`` of a method class
        self._items: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}
        self._discovered = False
        self._discovering = False
        self._entry_points: set[tuple[str, str]] = set()   # (name, value) already loaded

    # ------------------------------------------------------------------ registering
    def register(self, name: str, obj: T, description: str | None = None) -> T:
        """Add ``obj`` as ``name``; a different definition under the same name is refused."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ConfigError(f"bad {self.kind} name {name!r}: a non-empty name without ':' is required")
        if self._check is not None and not self._check(obj):
            raise ConfigError(f"{self.kind} {name!r}: {qualified_name(obj)} is not a valid {self.kind}")
        old = self._items.get(name)
        # The same definition again (a module imported twice, e.g. by reload) is not a conflict.
        if old is not None and old is not obj and old != obj and qualified_name(old) != qualified_name(obj):
            raise ConfigError(f"{self.kind} name {name!r} is registered twice: by {qualified_name(old)} "
                              f"and by {qualified_name(obj)}")
        if self._on_register is not None:
            self._on_register(name, obj)
        self._items[name] = obj
        self._descriptions[name] = description if description is not None else describe(obj)
        return obj

    def decorator(self, name: str) -> Callable[[T], T]:
        """A class decorator: ``@registry.decorator("name")``."""

        def deco(obj: T) -> T:
            return self.register(name, obj)

        return deco

    # ------------------------------------------------------------------ looking up
    def get(self, name: str) -> T:
        """The object registered as ``name``, or the object a ``module:Name`` reference points to."""
        if isinstance(name, str) and ":" in name:
            obj = resolve_reference(name, self.kind)
            if self._check is not None and not self._check(obj):
                raise ConfigError(f"{self.kind} reference {name!r} is not a valid {self.kind}")
            return obj
        if name not in self._items:
            self.discover()
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(self._unknown_message(name)) from None

    def create(self, name: str) -> Any:
        """A fresh instance of the class registered as ``name``; a class reached by a ``module:Class``
        reference (never registered) takes the reference as its ``name``."""
        cls: Any = self.get(name)
        if ":" in name and "name" not in vars(cls):
            cls.name = name
        return cls()

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._items

    def names(self) -> list[str]:
        """Registered names in registration order (built-ins first, in the order they were defined)."""
        self.discover()
        return list(self._items)

    def describe(self) -> list[tuple[str, str]]:
        """(name, one-line description) for every registered object, in registration order."""
        return [(name, self._descriptions.get(name, "")) for name in self.names()]

    def _unknown_message(self, name: Any) -> str:
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"; did you mean {close[0]!r}? " if close else "; "
        return f"unknown {self.kind} {name!r}{hint}known: {', '.join(known) or '(none)'}"

    # ------------------------------------------------------------------ discovery
    def discover(self) -> None:
        """Import the built-in modules (once) and load entry points not loaded yet.

        Entry points are scanned again on every call that needs them (a miss, a listing): the
        scan is cheap, and a package installed into a running process is then found too."""
        if self._discovering:
            return
        self._discovering = True   # a built-in module may look names up while it is imported
        try:
            if not self._discovered:
                for module in self._builtins:
                    _import_package(module)
                self._discovered = True
            for ep in importlib.metadata.entry_points(group=self.group):
                if (ep.name, ep.value) not in self._entry_points:
                    self._load_entry_point(ep)
                    self._entry_points.add((ep.name, ep.value))
        finally:
            self._discovering = False

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        try:
            obj = ep.load()
        except Exception as exc:  # a broken third-party package must say which one it is
            raise ConfigError(f"entry point {ep.name!r} = {ep.value!r} in group {self.group!r} "
                              f"cannot be loaded: {exc}") from exc
        if inspect.ismodule(obj):
            return   # a module registers its own objects with decorators on import
        if self._items.get(ep.name) is not obj:
            self.register(ep.name, obj)


def _import_package(name: str) -> None:
    """Import module ``name`` and, if it is a package, its public submodules (non-recursive)."""
    module = importlib.import_module(name)
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        if not info.name.startswith("_"):
            importlib.import_module(f"{name}.{info.name}")
