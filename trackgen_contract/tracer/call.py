"""`WarpCall`: one call into a watched Warp API, as its tracer saw it start."""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Mapping
from types import CodeType, FrameType

from .. import callsite, diagnostics, hotpaths
from ..handlers import raised_by_handler
from ..registry import Entry, Registry, installed
from ..sites import Site, in_warp, is_internal, is_launcher
from . import fastpath

_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_UNREAD = object()

#: What both cores call for each watched call: ``dispatch(tracers, entry, frame)``.
Dispatch = Callable[[tuple, Entry, FrameType], None]

# The fields of a direct call that depend on its call site alone.
_STATIC = ("direct", "walk", "caller", "caller_code")
# The fields `complete` reads, so that a call kept by an on_call stays readable.
_FIELDS = (
    "args",
    "explicit",
    "keywords",
    "site",
    "caller",
    "caller_code",
    "direct",
    "in_hot_path",
    "thread",
)


class WarpCall:
    """A watched Warp call, seen before it runs.

    Reading a call's arguments or walking its stack costs time (on Python 3.12, reading a
    frame's locals costs microseconds), so every field below but `api` and `op` is read
    from the live frames on first access and kept. A call that an ``on_call`` keeps (in
    a list, say) is read in full when ``on_call`` returns, so all of it stays readable
    afterwards; a call nobody keeps costs only what was read.

    Reading a call never runs the user's code and never raises this package's own error:
    what cannot be analysed falls back on what the callee's frame binds, with a
    `TrackgenContractWarning` naming the call.
    """

    # `explicit`, read at every launch and copy, has a slot of its own; the other fields go
    # to `_values` once read. Made at every watched call: kept small.
    # _outer: the walk's outermost Warp frame, while the call is live (see `outer_frame`).
    __slots__ = ("_explicit", "_frame", "_outer", "_values", "entry")

    def __init__(self, entry: Entry, frame: FrameType) -> None:
        self.entry = entry
        self._frame: FrameType | None = frame
        self._explicit: object = _UNREAD  # a callsite Passed, once read
        self._values: dict[str, object] | None = None
        self._outer: FrameType | None = None

    @classmethod
    def of(
        cls,
        api: str,
        *,
        args: Mapping[str, object] | None = None,
        explicit: frozenset[str] | None = None,
        site: Site | None = None,
        caller: Site | None = None,
        caller_code: CodeType | None = None,
        via: str | None = None,
        within: tuple[str, ...] = (),
        made_by: str | None = None,
        direct: bool | None = None,
        in_hot_path: bool = False,
        thread: int = 0,
    ) -> WarpCall:
        """A call built from known values rather than seen live: to test rules on calls that
        cannot be made here (a copy between two devices on a CPU-only machine) and to
        replay recorded calls. `site` and `caller` default to each other; `direct`
        defaults to whether the call is made inside no other watched call (`within`), and
        `made_by` to `via` for such a call, else to `api`."""
        entry = installed().by_api(api)
        call = cls(entry, None)  # type: ignore[arg-type]
        site = site or caller or Site.of(None)
        call._explicit = callsite.decision.Passed(explicit, explicit)
        call._values = dict(
            args=types.MappingProxyType(dict(args or {})),
            caller=caller or site,
            caller_code=caller_code,
            walk=(site, via or api, tuple(within), made_by or _made_by(api, via, within)),
            direct=not within if direct is None else direct,
            in_hot_path=in_hot_path,
            thread=thread,
        )
        return call

    @property
    def api(self) -> str:
        """The watched function, as reached from ``warp``: ``"wp.launch"``, or for an
        allocation one of Warp's own chokepoints (``"wp.array._init_new"``), where `via`
        names the public function the user's code called."""
        return self.entry.api

    @property
    def op(self) -> str:
        """Its kind of operation (one of `trackgen_contract.registry.OPS`)."""
        return self.entry.op

    @property
    def live(self) -> bool:
        """Whether the call has not started yet (``on_call`` is running)."""
        return self._frame is not None

    def complete(self) -> None:
        """Read every field now, while the frames are there (the tracer calls it for a
        call an ``on_call`` kept)."""
        for name in _FIELDS:
            getattr(self, name)
        self._walk()

    def _site_fields(self) -> dict[str, object]:
        # What is known of a direct call's site from an earlier call there (see fastpath).
        frame = self._frame
        caller = frame and frame.f_back
        known = caller and fastpath.static_fields(caller, frame.f_code)  # type: ignore[union-attr]
        if not known:
            return {}
        known["seeded"] = True
        return known

    def site_key(self) -> tuple[CodeType, int, CodeType, object] | None:
        """``(caller code, caller f_lasti, callee code, caller's module name)``: what tells
        the call site apart (the same code may run under other globals). A live call only."""
        frame = self._frame
        caller = frame and frame.f_back
        if caller is None:
            return None
        return caller.f_code, caller.f_lasti, frame.f_code, fastpath.module_key(caller.f_globals)  # type: ignore[union-attr]

    def release(self) -> None:
        """Let go of the frames: the call has started. What was found static about a
        direct call's site is kept for the next call there."""
        frame, self._frame, self._outer = self._frame, None, None
        values = self._values
        if (
            values
            and values.get("direct") is True
            and "walk" in values
            and "seeded" not in values
            and frame is not None
        ):
            fields = {name: values[name] for name in _STATIC if name in values}
            if frame.f_back is not None:
                fastpath.remember_fields(frame.f_back, frame.f_code, fields)

    def _read(self, name: str, compute: Callable[[FrameType], object], fallback: object) -> object:
        values = self._values
        if values is None:
            values = self._values = self._site_fields()
        value = values.get(name, _UNREAD)
        if value is not _UNREAD:
            return value
        frame = self._frame
        if frame is None:
            raise _not_read(name)
        try:
            value = compute(frame)
        except Exception as error:  # this package's own failure: never the user's problem
            if raised_by_handler(error):
                raise
            value = fallback(frame) if callable(fallback) else fallback
            self._unanalysed(error)
        values[name] = value
        return value

    def _unanalysed(self, error: Exception) -> None:
        frame = self._frame
        caller = frame.f_back if frame is not None else None
        site = _safe_site(caller)
        diagnostics.unanalysed(self.api, site.filename, site.lineno, site.module, error)

    @property
    def args(self) -> Mapping[str, object]:
        """The callee's bound arguments, by parameter name (read-only)."""
        return self._read("args", _bound_arguments, types.MappingProxyType({}))  # type: ignore[return-value]

    @property
    def explicit(self) -> frozenset[str] | None:
        """Names of the parameters the caller passed explicitly (``self`` included for a
        bound method), or None where that cannot be known (a call reached through C code
        that the tracer could not trace back)."""
        return self._passed("explicit").explicit

    @property
    def keywords(self) -> frozenset[str] | None:
        """Names of the parameters the caller surely passed by keyword: known also where
        `explicit` is not (a ``*`` of an iterator beside them); None where unknown."""
        return self._passed("keywords").keywords

    def _passed(self, name: str) -> callsite.decision.Passed:
        value = self._explicit
        if value is _UNREAD:
            frame = self._frame
            if frame is None:
                raise _not_read(name)
            try:
                value = callsite.passed(frame, self.entry.parameters)
            except Exception as error:
                if raised_by_handler(error):
                    raise
                value = callsite.decision.UNKNOWN_CALL
                self._unanalysed(error)
            self._explicit = value
        return value  # type: ignore[return-value]

    def learn_clean(self) -> None:
        """Remember this call's site as clean (no check of any policy can fire on such a
        call): the core answers later calls there without a `WarpCall`. Called by the
        guard when the rules say so; a live call only."""
        frame = self._frame
        if frame is None or frame.f_back is None:
            return
        stream = self.entry.watch.stream
        try:
            if stream is not None:  # a launch or copy: its call instruction decides it
                fastpath.learn(frame.f_back, self.entry, stream, made_by_warp=not self.direct)
            elif not self.direct:  # a memset, sync... Warp makes: its site and globals do
                fastpath.learn_site(frame.f_back, self.entry)
        except Exception as error:  # a site not remembered is only slower
            if raised_by_handler(error):
                raise
            self._unanalysed(error)

    def repeat_check(self) -> fastpath.Check | bool:
        """How to tell that a later call at this call site is made the same way (the same
        callable, called directly, with the same spelled-out arguments): a check to pass
        `made_as`, or False where that cannot be told cheaply. A live call only."""
        frame = self._frame
        if frame is None or frame.f_back is None:
            return False
        try:
            return fastpath.repeat_check(frame.f_back, frame.f_code)
        except Exception as error:  # a site not recognised again is only slower
            if raised_by_handler(error):
                raise
            self._unanalysed(error)
            return False

    def remember_repeat(
        self, tracer: object, check: fastpath.Check | None, answer: Callable[[], object]
    ) -> None:
        """Let `tracer` answer later calls made at this call's site the same way (see
        `Tracer.answer_repeats`). A live call only: a finished one remembers nothing."""
        frame = self._frame
        if frame is not None and frame.f_back is not None:
            fastpath.remember_repeat(frame.f_back, self.entry, check, tracer, answer)

    def made_as(self, check: fastpath.Check) -> bool:
        """Whether this live call passes a `repeat_check` of an earlier call at its site."""
        frame = self._frame
        caller = frame and frame.f_back
        try:
            return caller is not None and check(caller)  # type: ignore[arg-type]
        except Exception as error:  # not recognised: judged in full, as the first call was
            if raised_by_handler(error):
                raise
            return False

    def degrade(self, error: Exception) -> None:
        """Judge the rest of this call on bound values only: reading its shape failed."""
        self._explicit = callsite.decision.UNKNOWN_CALL
        self._unanalysed(error)

    @property
    def caller(self) -> Site:
        """The direct caller, Warp's own code included."""
        return self._read("caller", self._caller, lambda f: _safe_site(f.f_back))  # type: ignore[return-value]

    @property
    def caller_code(self) -> CodeType | None:
        """The code object of the direct caller (None when there is none)."""
        return self._read("caller_code", lambda f: f.f_back and f.f_back.f_code, None)  # type: ignore[return-value]

    def _caller(self, frame: FrameType) -> Site:
        # The user's own code calling directly: the same site the walk finds, made once.
        return self.site if self.direct else Site.of(frame.f_back)

    @property
    def site(self) -> Site:
        """The first frame outside Warp (and outside this package): the user's call."""
        return self._walk()[0]

    @property
    def via(self) -> str:
        """The public Warp function the user's code called to get here (``"wp.zeros"`` for
        an allocation at Warp's chokepoint); `api` itself when it was called directly."""
        return self._walk()[1]

    @property
    def within(self) -> tuple[str, ...]:
        """The watched Warp calls still running that this one is made for, outermost first
        (``("wp.array.numpy",)`` for the ``__array_interface__`` read that numpy() does)."""
        return self._walk()[2]

    @property
    def made_by(self) -> str:
        """The public Warp function whose call made this one: the outermost Warp function
        running inside the innermost call of `within` (``"wp.array"`` for the allocation
        that a ``wp.array(...)`` in ``wp.Volume.load_from_numpy`` makes), `via` where
        `within` is empty, and `api` itself for a direct call or where no Warp function
        runs between the two."""
        return self._walk()[3]

    @property
    def outer_frame(self) -> FrameType | None:
        """For a call Warp made itself, the frame of the outermost Warp function running
        for the program: the program's one call that this call serves (two allocations of
        one ``wp.zeros(n, requires_grad=True)`` share it). None for a call the program
        made directly, and once the call has started: the frame is not kept."""
        if self._frame is None:
            return None
        self._walk()
        return self._outer

    @property
    def direct(self) -> bool:
        """Whether the caller is the user's code, not Warp's (or this package's)."""
        return self._read(  # type: ignore[return-value]
            "direct", lambda f: f.f_back is None or not is_internal(f.f_back), True
        )

    @property
    def in_hot_path(self) -> bool:
        """Whether a function marked with `trackgen_contract.hot_path` is on the stack."""
        return self._read("in_hot_path", lambda f: hotpaths.on_stack(f.f_back), False)  # type: ignore[return-value]

    @property
    def thread(self) -> int:
        """`threading.get_ident()` of the calling thread."""
        return self._read("thread", lambda f: threading.get_ident(), 0)  # type: ignore[return-value]

    def _walk(self) -> tuple[Site, str, tuple[str, ...], str]:
        return self._read(  # type: ignore[return-value]
            "walk",
            self._walk_stack,
            lambda f: (_safe_site(f.f_back), self.entry.api, (), self.entry.api),
        )

    def _walk_stack(self, frame: FrameType) -> tuple[Site, str, tuple[str, ...], str]:
        # One pass from the caller down to the first frame of the user's: the watched calls
        # passed on the way, the outermost Warp function, the outermost one inside the
        # innermost watched call (the maker), and the user's frame.
        api = self.entry.api
        if self.direct:
            return _program_site(frame.f_back), api, (), api
        registry = installed()
        within: list[str] = []
        outermost = maker = None
        current = frame.f_back
        while current is not None and is_internal(current):
            code = current.f_code
            entry = registry.entry(code)
            served = entry.api if entry is not None else registry.served_api(code)
            if served is not None:
                within.append(served)
            if in_warp(current):
                outermost = current
                maker = maker if within else current
            current = current.f_back
        self._outer = outermost
        via = _public_name(registry, outermost) if outermost is not None else api
        made_by = via if not within else _public_name(registry, maker) if maker else api
        return _program_site(current), via, tuple(reversed(within)), made_by

    def __repr__(self) -> str:
        state = "live" if self._frame is not None else "done"
        return f"<WarpCall {self.entry.watch.text} ({state})>"

    def __str__(self) -> str:
        site = (self._values or {}).get("walk")
        return self.entry.watch.text + (f" from {site[0]}" if site else "")  # type: ignore[index]


def _not_read(name: str) -> RuntimeError:
    return RuntimeError(
        f"WarpCall.{name} was not read while the call was live, and the call was not kept "
        "by on_call; read it inside on_call, or keep the call"
    )


def _made_by(api: str, via: str | None, within: tuple[str, ...]) -> str:
    # What `WarpCall.of` takes for `made_by` where none is given: `via` for a call made
    # inside no other watched call, else the call itself (no Warp function between).
    return api if within else via or api


def _public_name(registry: Registry, frame: FrameType) -> str:
    """How Warp's public API names the function running in `frame`."""
    code = frame.f_code
    entry = registry.entry(code)
    if entry is not None:
        return entry.api
    module = dict.get(frame.f_globals, "__name__", "")
    return registry.public_name(code, module if type(module) is str else "", frame)


def _program_site(frame: FrameType | None) -> Site:
    """The site of the user's frame `frame`; the placeholder where the command line's own
    frame stands for it (the program's frames are all above that one)."""
    return Site.of(None if frame is None or is_launcher(frame) else frame)


def _safe_site(frame: FrameType | None) -> Site:
    try:
        return Site.of(frame)
    except Exception as error:
        if raised_by_handler(error):
            raise
        return Site.of(None)


def _bound_arguments(frame: FrameType) -> Mapping[str, object]:
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & _CO_VARARGS) + bool(code.co_flags & _CO_VARKEYWORDS)
    local = frame.f_locals
    return types.MappingProxyType(
        {name: local[name] for name in code.co_varnames[:count] if name in local}
    )
