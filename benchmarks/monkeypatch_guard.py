"""A monkeypatching guard, for comparison only: the design trackgen_contract replaces.

While a guard is active it replaces each watched Warp function wherever a module binds it
(scanning ``sys.modules``, so ``from warp import launch`` is covered) and each watched
method on its class, with a lean wrapper that checks a context variable and records the
call shape (the API, whether ``stream=`` was passed). Everything is put back on exit.

It is meant to be fair: one context-variable read and one tuple append per call inside a
guard, one context-variable read outside it, and no rules beyond the stream shape.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import types

from trackgen_contract.registry import TABLE, parse_version

_record: contextvars.ContextVar[list | None] = contextvars.ContextVar("mp_record", default=None)

# the position of `stream` in the positional parameters, by public name
_STREAM_POSITION = {"wp.launch": 7, "wp.launch_tiled": 7, "wp.copy": 5, "wp.Launch.launch": 1}


def _wrap(fn, api: str):
    position = _STREAM_POSITION.get(api, 1 << 30)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        record = _record.get()
        if record is not None:
            record.append((api, "stream" in kwargs or len(args) > position))
        return fn(*args, **kwargs)

    return wrapper


def _targets() -> list[tuple[object, str, object, str]]:
    """(owner, attribute, original, api) for every watched function and method."""
    import warp as wp

    version = parse_version(wp.__version__)
    roots = {"wp": wp, "ctx": sys.modules[wp.launch.__module__]}
    found = []
    for watch in TABLE:
        root, *path = watch.path.split("/")[0].split(".")
        if "/" in watch.path or root not in roots or not watch.applies_to(version):
            continue
        owner = roots[root]
        for name in path[:-1]:
            owner = getattr(owner, name)
        original = (
            vars(owner).get(path[-1]) if isinstance(owner, type) else getattr(owner, path[-1])
        )
        if isinstance(original, types.FunctionType):
            found.append((owner, path[-1], original, watch.api))
    return found


class MonkeypatchGuard:
    """Records watched Warp calls by patching them; a context manager yielding the record."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self._undo: list[tuple[object, str, object]] = []
        self._token = None

    def __enter__(self) -> MonkeypatchGuard:
        self.calls = []
        self._token = _record.set(self.calls)
        wrappers = {}
        for owner, name, original, api in _targets():
            wrapper = wrappers.setdefault(id(original), _wrap(original, api))
            self._patch(owner, name, wrapper)
        # Rebind every module-level alias too: the scan the seed's design needs.
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                wrapper = wrappers.get(id(value))
                if wrapper is not None and callable(value):
                    self._patch(module, name, wrapper)
        return self

    def _patch(self, owner: object, name: str, value: object) -> None:
        original = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
        if original is value:
            return
        self._undo.append((owner, name, original))
        setattr(owner, name, value)

    def __exit__(self, *exc_info: object) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()
        _record.reset(self._token)
