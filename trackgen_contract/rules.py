"""What a watched call means: one plain function per category of the contract.

Each rule takes one `WarpCall` and a `Policy` and says *violation*, *allowed*,
*sanctioned*, or nothing (None). Rules read only what they need, cheapest first: a launch
that passes ``stream=`` is cleared by its call instruction alone, without reading the
callee's arguments or walking the stack.

Attribution: host syncs, allocations and captures are checked from every caller; a launch
or copy counts against the first frame outside Warp (so a Warp utility that launches on
the user's behalf is the user's launch); a memset or ``ScopedStream`` counts only when the
user's code calls it directly. One user call gives one violation: a watched call that Warp
makes while serving another watched call of the same category is not reported again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from types import FrameType
from typing import NamedTuple

from . import sanction
from .callsite.readback import Unresolved, attribute, is_one_of
from .handlers import raised_by_handler
from .registry import (
    ALLOC,
    ALLOCATOR,
    CAPTURE,
    COPY,
    LAUNCH,
    MEMSET,
    NATIVE,
    READBACK,
    SCOPED_STREAM,
    SYNC,
    TABLE,
    Entry,
    installed,
)
from .sites import Site
from .tracer import WarpCall
from .tracer.fastpath import Check  # of a caller's frame (see `WarpCall.repeat_check`)

#: Violation categories, in report order.
CATEGORIES = ("host_sync", "allocation", "stream", "capture")

#: One line of advice per category, shown with its violations.
HINTS = {
    "host_sync": "A CUDA graph cannot contain a host synchronization or a read of device "
    "memory from Python: move it out of the hot path or read results after the graph runs.",
    "allocation": "A capturable hot path reuses buffers: allocate them once, before the "
    "hot path (at construction or in a setup step), and pass them in.",
    "stream": "Work must land on the stream being captured: pass stream= to every launch "
    "and copy, and do not rely on Warp's current stream (assign/zero_/fill_, ScopedStream).",
    "capture": "A hot path is recorded into its caller's graph: it must not open, end or "
    "launch a graph of its own.",
}

VIOLATION, ALLOWED, SANCTIONED = "violation", "allowed", "sanctioned"

Key = tuple[str, str, str]

_OP_CATEGORIES = {
    SYNC: ("host_sync",),
    READBACK: ("host_sync",),
    COPY: ("host_sync", "stream"),
    LAUNCH: ("stream",),
    MEMSET: ("stream",),
    SCOPED_STREAM: ("stream",),
    CAPTURE: ("capture",),
    ALLOC: ("allocation",),
    ALLOCATOR: ("allocation",),
    NATIVE: ("allocation",),
}
_API_CATEGORIES = {watch.api: _OP_CATEGORIES[watch.op] for watch in TABLE}
_HOST_SYNC_APIS = tuple(sorted({w.api for w in TABLE if w.op in (SYNC, READBACK, COPY)}))


@dataclass(frozen=True)
class Violation:
    """One breach of the contract.

    Attributes:
        category: one of `CATEGORIES`.
        api: the Warp call as the user made it, e.g. ``"wp.array.numpy()"``,
            ``"wp.zeros()"``, ``"wp.launch without stream="``.
        site: the first frame outside Warp (the user's line).
        key: ``(api without "()", module, function)`` of the function the breach is
            counted against: the direct caller of a host sync (the form ``allow=``
            takes), else the site.
        array: for an array allocation recorded by a non-strict guard, the array it made
            (kept alive by the guard); else None.
    """

    category: str
    api: str
    site: Site
    key: Key = ()  # type: ignore[assignment]
    array: object | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.api} from {self.site}"


class Finding(NamedTuple):
    """What a rule made of a call: an outcome and the breach it concerns."""

    outcome: str  # VIOLATION, ALLOWED or SANCTIONED
    violation: Violation


@dataclass(frozen=True)
class Policy:
    """Which checks apply, and to whom (build it with `make_policy`)."""

    checks: frozenset[str] = frozenset(CATEGORIES)
    modules: tuple[str, ...] | None = None  # None: every caller outside Warp
    allow: frozenset[Key] = frozenset()
    keep_arrays: bool = True  # hold allocated arrays in `Violation.array`

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The watched entries on which one of the policy's checks can fire: what a tracer
        for this policy needs armed (one shared tuple per set of checks)."""
        return _entries_for(self.checks)

    @property
    def rules(self) -> dict[str, tuple[Rule, ...]]:
        """For each kind of operation, the rules of the checks that can fire on it (one
        shared table per set of checks: `judge` looks them up at every watched call)."""
        return _rules_for(self.checks)


@cache
def _rules_for(checks: frozenset[str]) -> dict[str, tuple[Rule, ...]]:
    # A plain cache, not cached_property: on 3.11 that holds one class-wide lock while it
    # computes, which a fork can leave held in the child.
    return {
        op: tuple(RULES[c] for c in categories if c in checks)
        for op, categories in _OP_CATEGORIES.items()
    }


@cache
def _entries_for(checks: frozenset[str]) -> tuple[Entry, ...]:
    ops = {op for op, categories in _OP_CATEGORIES.items() if checks & set(categories)}
    return tuple(entry for entry in installed() if entry.op in ops)


def make_policy(
    *,
    checks: Iterable[str] = CATEGORIES,
    modules: object = None,
    allow: object = (),
    keep_arrays: bool = True,
) -> Policy:
    """A `Policy` from user input, with an error naming any argument that is wrong."""
    return Policy(_checks(checks), _modules(modules), _allow(allow), bool(keep_arrays))


def _checks(checks: Iterable[str]) -> frozenset[str]:
    if isinstance(checks, str):
        raise TypeError(f"checks must be a collection of categories, got the string {checks!r}")
    chosen = frozenset(checks)
    unknown = sorted(c for c in chosen if c not in CATEGORIES)
    if unknown:
        raise ValueError(f"unknown check category {unknown[0]!r}; the categories are {CATEGORIES}")
    if not chosen:
        raise ValueError(
            f"no check is switched on, so nothing would be checked; choose at least one of "
            f"{', '.join(CATEGORIES)}"
        )
    return chosen


def _modules(modules: object) -> tuple[str, ...] | None:
    if modules is None:
        return None
    given = modules
    if isinstance(modules, str):
        modules = (modules,)
    # As the user passed it; a comma-separated string (the command line's spelling) gets
    # the sequence it means.
    several = (
        tuple(m.strip() for m in given.split(",") if m.strip()) if isinstance(given, str) else ()
    )
    hint = f"; for several, give a sequence: {several!r}" if len(several) > 1 else ""
    wrong = TypeError(
        "modules must be None (every caller), a module name or a sequence of module names "
        f"such as ('acme', 'acme_tracks'), got {given!r}{hint}"
    )
    try:
        names = tuple(modules)  # type: ignore[arg-type]
    except TypeError:
        raise wrong from None
    if not names:
        raise ValueError(
            "modules is empty, so the stream rules would check nothing; "
            "pass None (the default) to check every caller outside Warp"
        )
    names = _exact_strings(names)
    for name in names:
        if type(name) is not str or not is_module_name(name):
            raise wrong
    return names


def _exact_strings(parts: tuple) -> tuple:
    # A str subclass's own __eq__, __hash__ or __add__ would run at every call judged:
    # its plain text is kept (str.__str__ copies it without running the subclass's code).
    return tuple(str.__str__(p) if issubclass(type(p), str) else p for p in parts)


def is_module_name(name: str) -> bool:
    """Whether `name` is a dotted module name (``acme``, ``acme.gen``)."""
    return all(part.isidentifier() for part in name.split("."))


def _allow(allow: object) -> frozenset[Key]:
    wrong = (
        "allow takes (api, module, function) tuples, "
        "e.g. ('wp.array.numpy', 'acme.gen', 'Gen.generate')"
    )
    if isinstance(allow, str):
        parts = tuple(allow.split(":"))
        spelled = f" (the command line's spelling: here [{parts!r}])" if len(parts) == 3 else ""
        raise TypeError(f"{wrong}, got the string {allow!r}{spelled}")
    if isinstance(allow, tuple) and len(allow) == 3 and all(isinstance(p, str) for p in allow):
        raise TypeError(f"{wrong}: pass a collection of keys, got the single key {allow!r}")
    try:
        keys = list(allow)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{wrong}, got {allow!r}") from None
    normal = []
    for key in keys:
        if not (
            isinstance(key, (tuple, list))
            and len(key) == 3
            and all(isinstance(p, str) and p for p in key)
        ):
            raise TypeError(f"{wrong}; got the malformed key {key!r}")
        key = _exact_strings(tuple(key))
        api = key[0].removesuffix("()")
        if api not in _HOST_SYNC_APIS:
            raise ValueError(
                f"allow: {key[0]!r} in {tuple(key)!r} is not a host sync or readback API; "
                f"allow takes one of {', '.join(_HOST_SYNC_APIS)}"
            )
        normal.append((api, key[1], key[2]))
    return frozenset(normal)


# --- helpers --------------------------------------------------------------------------


def _served(call: WarpCall, category: str) -> bool:
    """Whether Warp makes `call` while serving an outer watched call of `category`."""
    if call.direct:
        return False  # the user's own call: nothing of Warp's is running around it
    outer = installed().entry(call.caller_code)  # type: ignore[arg-type]
    if outer is not None and category in _API_CATEGORIES[outer.api]:
        return True  # made by the watched function itself (numpy() reading its array)
    return any(category in _API_CATEGORIES[api] for api in call.within)


def _in_modules(module: str, prefixes: tuple[str, ...] | None) -> bool:
    if prefixes is None:
        return True
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _bound_value(call: WarpCall, name: str) -> object:
    """The value bound to parameter `name`, also when it went through ``*args``/``**kw``."""
    args = call.args
    if name in args:
        return args[name]
    code = call.entry.code
    extra = code.co_varnames[code.co_argcount + code.co_kwonlyargcount :]
    for star in extra[: bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)]:
        value = args.get(star)
        if type(value) is dict:  # the callee's **kwargs
            found = _keyword(value, name)
            if found is not _ABSENT:
                return found
        positional = call.entry.watch.positional
        if type(value) is tuple and name in positional:
            index = positional.index(name)
            if index < len(value):
                return value[index]
    return None


_ABSENT = object()


def _keyword(kwargs: dict, name: str) -> object:
    """``kwargs[name]`` as Python bound it: a key that is a str subclass (from a caller's
    ``**{S("stream"): s}``) compared as text, as Python's binding compares keywords, not
    through the subclass's own __eq__; `_ABSENT` where there is none."""
    for key, value in dict.items(kwargs):
        if issubclass(type(key), str) and str.__eq__(key, name):
            return value
    return _ABSENT


def _passed(call: WarpCall, name: str) -> bool:
    """Whether the caller passed parameter `name` (its value, where that cannot be known)."""
    explicit = call.explicit
    if explicit is not None:
        return name in explicit
    keywords = call.keywords
    if keywords is not None and name in keywords:
        return True  # by keyword, whatever an unreadable positional part held
    return _bound_value(call, name) is not None


def _records_only(call: WarpCall) -> bool:
    """``wp.launch(..., record_cmd=True)`` returns a `Launch` and runs nothing. (Only a
    plain true value counts: the truth of an object of the user's would run its code.)"""
    if call.op != LAUNCH or not _passed(call, "record_cmd"):
        return False
    value = _bound_value(call, "record_cmd")
    return is_one_of(type(value), (bool, int)) and bool(value)


@cache
def _several_devices() -> bool:
    import warp

    return warp.get_cuda_device_count() > 0


def _copy_devices(call: WarpCall) -> tuple[str, str] | None:
    """``(source device, destination device)`` of a copy between two devices, else None."""
    if not _several_devices():
        return None  # a CPU-only runtime has one device: no copy can cross devices
    dest, src = (_device(call.args.get(name)) for name in call.entry.watch.devices)
    if dest is None or src is None or dest[0] == src[0]:
        return None
    return src[0], dest[0]


def _device(array: object) -> tuple[str, int] | None:
    """``(alias, ordinal)`` of a Warp array's device, read as Warp stores them (its
    ``str()`` is the alias; a negative ordinal is the CPU); None when they are not there."""
    try:
        device = attribute(array, "device")
        alias, ordinal = attribute(device, "alias"), attribute(device, "ordinal")
    except Unresolved:
        return None
    return (alias, ordinal) if type(alias) is str and type(ordinal) is int else None


def _cpu_array(value: object) -> bool:
    device = _device(value)
    return device is not None and device[1] < 0


def _allocates(call: WarpCall) -> bool:
    """Whether an allocation call really allocates: a zero-size array gets no memory
    (Warp leaves its pointer None and calls no allocator), nor does a zero-byte request."""
    op = call.op
    if op == ALLOC:
        shape = call.args.get("shape")
        dims = (shape,) if type(shape) is int else shape
        if is_one_of(type(dims), (tuple, list)) and all(type(d) is int for d in dims):  # type: ignore[union-attr]
            return all(d != 0 for d in dims)  # type: ignore[union-attr]
        return True
    if op == ALLOCATOR:
        size = call.args.get("size_in_bytes")
        return not (type(size) is int and size == 0)
    data = call.entry.watch.data
    return data is None or _bound_value(call, data) is not None  # Volume(None): a shell


# --- the rules ------------------------------------------------------------------------


def host_sync(call: WarpCall, policy: Policy) -> Finding | None:
    """``wp.synchronize*``, a readback of device data, or a copy between two devices."""
    op = call.op
    if op == COPY:
        devices = _copy_devices(call)
        if devices is None or _served(call, "host_sync"):
            return None
        text = f"wp.copy from {devices[0]} to {devices[1]}"
    elif op in (SYNC, READBACK):
        if _served(call, "host_sync"):
            return None  # numpy() reading __array_interface__: one user call, one violation
        if call.api == "wp.array.__array_interface__" and not _cpu_array(call.args.get("self")):
            return None  # a CUDA array refuses it: no readback happens
        text = call.entry.watch.text
    else:
        return None
    caller = call.caller
    key = (call.api, caller.module, caller.function)
    violation = Violation("host_sync", text, call.site, key)
    if sanction.is_sanctioned(call.caller_code):
        return Finding(SANCTIONED, violation)
    if key in policy.allow:
        return Finding(ALLOWED, violation)
    return Finding(VIOLATION, violation)


def allocation(call: WarpCall, policy: Policy) -> Finding | None:
    """A Warp array allocation, a raw allocator call, or a native Warp object."""
    op = call.op
    if op not in (ALLOC, ALLOCATOR, NATIVE) or not _allocates(call):
        return None
    if _served(call, "allocation"):
        return None
    site, via = call.site, call.via
    array = call.args.get("self") if op == ALLOC and policy.keep_arrays else None
    violation = Violation("allocation", f"{via}()", site, (via, site.module, site.function), array)
    return Finding(VIOLATION, violation)


def stream(call: WarpCall, policy: Policy) -> Finding | None:
    """Device work that does not name its stream."""
    op = call.entry.op
    if op in (LAUNCH, COPY):
        # The common case, a launch that names its stream, ends at the first test.
        if _passed(call, call.entry.watch.stream) or _records_only(call) or _served(call, "stream"):
            return None
        where, text = call.site, f"{call.api} without stream="
    elif op in (MEMSET, SCOPED_STREAM):
        if not call.direct:
            return None  # Warp's own memsets (wp.zeros filling its new array) are not the user's
        where, text = call.caller, call.entry.watch.text
    else:
        return None
    if not _in_modules(where.module, policy.modules):
        return None
    return Finding(
        VIOLATION, Violation("stream", text, where, (call.api, where.module, where.function))
    )


def capture(call: WarpCall, policy: Policy) -> Finding | None:
    """Opening, ending or launching a graph."""
    if call.op != CAPTURE or _served(call, "capture"):
        return None
    site = call.site
    violation = Violation(
        "capture", call.entry.watch.text, site, (call.api, site.module, site.function)
    )
    return Finding(VIOLATION, violation)


Rule = Callable[[WarpCall, Policy], "Finding | None"]

RULES: dict[str, Rule] = {
    "host_sync": host_sync,
    "allocation": allocation,
    "stream": stream,
    "capture": capture,
}


def depends_on_site_only(call: WarpCall) -> bool | Check:
    """Whether every finding of every rule on `call` follows from its call site alone, so
    that a guard may judge a repeat call at that site as it judged this one.

    True for a sync, readback, memset, ScopedStream or capture the user's code makes
    directly (nothing of Warp's around it), from a function that no sanction can let
    through. For a launch the user's code makes directly, with its arguments spelled out
    and no ``record_cmd=``, a check (see `WarpCall.repeat_check`): its findings follow
    from the call site as long as the site calls the same function the same way. False
    for the rest, judged every time: a readback of ``__array_interface__`` (its array's
    device decides), a copy, an allocation (their arguments decide), any call whose shape
    is read back from values.
    """
    op = call.op
    if op not in _SITE_ONLY_OPS or call.api == "wp.array.__array_interface__":
        return False
    if not call.direct or sanction.may_sanction(call.caller_code):
        return False
    if op != LAUNCH:
        return True
    explicit = call.explicit
    if explicit is None or "record_cmd" in explicit:
        return False
    return call.repeat_check()


_SITE_ONLY_OPS = frozenset((SYNC, READBACK, MEMSET, SCOPED_STREAM, CAPTURE, LAUNCH))


class Known(NamedTuple):
    """The findings remembered for a call site (see `SiteVerdicts`): its `WarpCall.site_key`,
    the check a repeat call there must pass (None: the site alone decides), and
    `sanction.marks` when they were found."""

    key: tuple
    findings: list[Finding]
    check: Check | None
    marks: int


class SiteVerdicts:
    """`judge` under one policy, with the findings of the breaching call sites whose
    findings follow from the site alone remembered (see `depends_on_site_only`): a repeat
    breach there is judged as the first one was, without reading the call again. (A clean
    site is the core's to skip: see `WarpCall.learn_clean`.) Bounded: it holds the code
    objects it names, and starts over when full."""

    LIMIT = 4096  # sites

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        # (id(caller code), lasti, id(callee code)) -> (site key, findings, the check a
        # repeat call must pass, or None). Ids: hashing code objects is slow.
        self._known: dict[tuple[int, int, int], Known] = {}

    def judge(self, call: WarpCall) -> tuple[list[Finding], Known | None]:
        """The findings on `call`, and what was remembered of its site if they came from
        there (None when the call was judged)."""
        key = call.site_key()
        slot = key and (id(key[0]), key[1], id(key[2]))
        known = self._known.get(slot) if slot else None
        marks = sanction.marks()
        if (
            known is not None
            and known.key == key
            and known.marks == marks  # else: its caller may be sanctioned now
            and (known.check is None or call.made_as(known.check))
        ):
            return known.findings, known
        findings = judge(call, self.policy)
        if slot and findings:
            site_only = depends_on_site_only(call)
            if site_only is not False:
                if len(self._known) >= self.LIMIT:
                    self._known.clear()
                check = None if site_only is True else site_only
                self._known[slot] = Known(key, findings, check, marks)  # type: ignore[arg-type]
        return findings, None

    def forget(self) -> None:
        """Drop what was remembered (it holds code objects)."""
        self._known.clear()


_Held = tuple[FrameType, set[object]]  # a program call's outer frame, the kinds counted


class OncePerProgramCall:
    """One call of the program gives one violation: of the watched calls Warp makes
    itself while serving one call of the program (the two allocations of
    ``wp.zeros(n, requires_grad=True)``, each readback of one ``wp.optim.linear.cg``),
    only the first of each kind (a report's row: a category and an API, see
    `finding_row`; a row of the table of calls) counts.

    The program's call is told by the frame of the outermost Warp function running for
    it (`WarpCall.outer_frame`). Per thread, the frames of the program calls still running
    are held, outermost first, with the kinds counted for each: a program call nested in
    another (``cg`` calling the program's own matvec, which calls ``bsr_mv``) is counted
    apart, and the outer one is still the same call after it. While a frame is held no
    other frame takes its id; one whose call has ended is let go at the next program call
    that is not nested in it, or at `forget` (a guard's exit). So the last frame, with its
    locals, may outlive its call until then; nothing is held once forgotten."""

    def __init__(self) -> None:
        self._held: dict[int, list[_Held]] = {}  # thread -> each nested in the one before

    def first(self, call: WarpCall, kind: object) -> bool:
        """Whether `call` is the first of `kind` for the program's call it serves (any
        call the program made directly is). A live call only."""
        outer = call.outer_frame
        if outer is None:
            return True
        held = self._held.setdefault(call.thread, [])
        for depth in range(len(held) - 1, -1, -1):
            frame, kinds = held[depth]
            if frame is outer:
                del held[depth + 1 :]  # Warp's own code runs again: what it called is over
                if kind in kinds:
                    return False
                kinds.add(kind)
                return True
        held[:] = _still_running(held, outer)
        held.append((outer, {kind}))
        return True

    def forget(self) -> None:
        """Let go of the frames held."""
        self._held.clear()


def _still_running(held: list[_Held], frame: FrameType) -> list[_Held]:
    """The entries of `held` whose frames are on the stack above `frame` (their calls run
    still): walked up until each is found, or to the stack's end. Held frames are alive,
    so their ids are theirs."""
    wanted = {id(entry[0]) for entry in held}
    found = set()
    current = frame.f_back
    while current is not None and len(found) < len(wanted):
        if id(current) in wanted:
            found.add(id(current))
        current = current.f_back
    return [entry for entry in held if id(entry[0]) in found]


def finding_row(finding: Finding) -> tuple[str, str]:
    """The report's row a finding goes to, but for its site: its category and API."""
    return finding.violation.category, finding.violation.api


def clean_under_every_policy(call: WarpCall) -> bool:
    """Whether no check of any policy can fire on `call`, nor on any call made the same
    way from the same call site: a launch, or a copy on a runtime without CUDA, whose
    caller passed ``stream=`` (read off its call instruction); or a call Warp's own code
    makes that no rule counts against anyone (a memset or ScopedStream Warp makes, a sync
    or readback served by the watched function making it)."""
    op = call.op
    if op in (MEMSET, SCOPED_STREAM):
        return not call.direct
    if op in (SYNC, READBACK):
        outer = installed().entry(call.caller_code)  # type: ignore[arg-type]
        return not call.direct and outer is not None and outer.op in (SYNC, READBACK)
    if op not in (LAUNCH, COPY) or (op == COPY and _several_devices()):
        return False
    explicit = call.explicit
    return explicit is not None and call.entry.watch.stream in explicit


def covers(call: WarpCall, policy: Policy) -> bool:
    """Whether one of the policy's checks looks at `call`: one that checks its kind of
    operation, and, where that is the stream rules alone, made by (or for) a caller in the
    policy's modules. (A call no check looks at cannot count as checked.)"""
    op = call.entry.op
    if op in (MEMSET, SCOPED_STREAM) and not call.direct:
        return False  # Warp's own (wp.zeros filling its array): the stream rules skip it
    anywhere = _covers_anywhere(policy, op)
    if anywhere is not None:
        return anywhere
    where = call.caller if op in (MEMSET, SCOPED_STREAM) else call.site
    return _in_modules(where.module, policy.modules)


def covers_clean(policy: Policy, op: str, module: str | None) -> bool | None:
    """`covers`, for the calls at a clean call site (see `clean_under_every_policy`) of
    the kind of operation `op`, made directly from `module` (a direct call's site is its
    caller), or by Warp's own code (None). None where that cannot tell: the stream rules
    narrowed to modules, for a launch or copy Warp's code makes for a caller further up."""
    if module is None and op in (MEMSET, SCOPED_STREAM):
        return False
    anywhere = _covers_anywhere(policy, op)
    if anywhere is not None:
        return anywhere
    return None if module is None else _in_modules(module, policy.modules)


def _covers_anywhere(policy: Policy, op: str) -> bool | None:
    """Whether the policy's checks look at calls of `op` from any caller (True), from
    none (False), or only from its modules (None: the stream rules alone, narrowed)."""
    # Asked in the core's callback too: C calls, no comprehension (a frame on 3.11).
    categories = tuple(filter(policy.checks.__contains__, _OP_CATEGORIES[op]))
    if categories != ("stream",) or policy.modules is None:
        return bool(categories)
    return None


def judge(call: WarpCall, policy: Policy) -> list[Finding]:
    """Every finding of the policy's checks on one call, in category order.

    An error of this package's own while judging is never raised into the user's call: the
    call is judged again on the values it binds (its shape unknown), with a warning."""
    try:
        return _judge(call, policy)
    except Exception as error:
        if raised_by_handler(error):
            raise
        call.degrade(error)
    try:
        return _judge(call, policy)
    except Exception as error:
        if raised_by_handler(error):
            raise
        return []  # nothing can be said of it; the warning above names it


def _judge(call: WarpCall, policy: Policy) -> list[Finding]:
    findings = []
    for rule in policy.rules[call.entry.op]:
        finding = rule(call, policy)
        if finding is not None:
            findings.append(finding)
    return findings
