"""Clean call sites, answered from the caller's frame alone.

Most watched calls in a hot loop come from one call site and are judged the same way every
time: a launch (or, on a machine without CUDA, a copy) whose call instruction passes
``stream=`` with every argument spelled out cannot breach any category under any policy.
A guard that judged such a call clean has the site remembered here (`learn`), and the
core's callback then answers the next call at that site before any `WarpCall` exists:
one dict lookup keyed by the caller's ``f_lasti`` (no ``id()`` call: the offset alone
tells most sites apart; callers with a site at the same offset share a slot, one lookup
more), identity tests on the caller's and the callee's code objects, and, where the
offset alone cannot prove that the site calls the watched function itself (3.13+, where
a direct call and one made through C rest on the same instruction, or a stream passed by
position), a re-read of the callable the site loads and an identity test. A call with
``*`` or ``**`` parts (``wp.launch(k, n, **opts)``, or Warp's own
``launch(*args, **kwargs)`` in ``launch_tiled``) has its parts read again too, as the
full path reads them (`Spread`). A site in Warp's own code (a memset or a
``ScopedStream`` Warp makes) is clean by its offset, under the very module name it was
found with (`learn_site`).

Only tracers that ask for every call (a plain `Tracer`, the command line) keep the full
path: the callback skips a clean call only when every running tracer of the thread that
watches its kind of operation lets clean calls pass (made with ``every_call=False``), and
counts it for those tracers alone whose ``counts`` takes calls of its kind from its
caller's module (a guard: those its checks look at), asked once per kind and module.

A breach whose findings follow from its call site alone (see `rules.SiteVerdicts`) is
judged at its first two calls; a guard (or the command line's recording) then lets its
tracer answer the site's repeat calls (`remember_repeat`), and the core hands a repeat
call, recognised the same way, straight to that answer (`answer_repeat`): no `WarpCall`,
no reading of the call. Only while that tracer is the only running one of its thread that
watches the call; its sites are dropped when it stops.

The tables hold the code objects they name, so they are bounded (emptied when full) and
emptied when the core disarms.
"""

from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable, Mapping
from functools import partial
from types import CodeType, FrameType, MappingProxyType

from ..callsite import CallSite, call_site, readback
from ..callsite.readback import class_lookup
from ..callsite.values import Args, Const, Kwargs, Method, Ref, Star
from ..handlers import raised_by_handler
from ..registry import Entry
from ..sites import module_name

_LIMIT = 4096  # remembered sites before the table starts over
_PY313 = sys.version_info >= (3, 13)

Check = Callable[[FrameType], bool]
_type_dict = type.__dict__["__dict__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_flags = type.__dict__["__flags__"].__get__
_method_function = types.MethodType.__dict__["__func__"].__get__
_method_self = types.MethodType.__dict__["__self__"].__get__
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class whose namespace can still change


class Binding:
    """A site's callable, loaded from its caller's globals: ``globals[variable]`` is
    `bound`, the watched function itself (``launch(...)``), or a plain module whose
    namespace still binds `attribute` to the watched function `target`
    (``wp.launch(...)``). Globals of a ``dict`` subclass never pass: its own
    ``__getitem__`` would answer the load. In a module's body (`module_body`: the name is
    read by LOAD_NAME) the frame's locals must be its globals too. The core's callback
    tests the same inline."""

    __slots__ = ("attribute", "bound", "module_body", "namespace", "target", "variable")

    def __init__(
        self,
        variable: str,
        bound: object,
        attribute: str | None,
        namespace: dict | None,
        module_body: bool = False,
    ) -> None:
        self.variable, self.bound = variable, bound
        self.attribute, self.namespace = attribute, namespace
        self.target = bound if namespace is None else namespace.get(attribute)
        self.module_body = module_body

    def holds(self, frame: FrameType) -> bool:
        """Whether `frame`'s site still loads the watched function this way."""
        globals_ = frame.f_globals
        return (
            type(globals_) is dict
            and (not self.module_body or _module_body(frame))
            and dict.get(globals_, self.variable) is self.bound
            and (
                self.namespace is None
                or (
                    type(self.bound) is types.ModuleType  # not made another class since
                    and dict.get(self.namespace, self.attribute) is self.target
                )
            )
        )


class Counted:
    """What the calls at a remembered clean site count as, for a tracer's ``counts``
    (asked once per these, not per call): their kind of operation, and their caller's
    module (None where Warp's own code makes them). One object per pair (see
    `counted_as`): answers are looked up by identity."""

    __slots__ = ("module", "op")

    def __init__(self, op: str, module: str | None) -> None:
        self.op = op
        self.module = module


_counted: dict[tuple[str, str | None], Counted] = {}


def counted_as(op: str, module: str | None) -> Counted:
    """The one `Counted` of `op` and `module`."""
    found = _counted.get((op, module))
    if found is None:
        found = _counted[op, module] = Counted(op, module)
    return found


def _binding_of(check: Check | None) -> Binding | None:
    """The `Binding` whose ``holds`` `check` is (a bound method), or None: the callback
    and the compiled filter test a binding inline."""
    owner = getattr(check, "__self__", None)
    return owner if type(owner) is Binding else None


class Clean:
    """A remembered clean call site: its caller's code and module name (the very
    ``__name__`` object of its globals), its callee's code, what its calls count as, and
    the check, with its `Binding` where it is one (the callback reads those fields inline).
    (The name: the same code run under another module's globals, by
    ``types.FunctionType(code, other)`` or an ``exec`` of one compiled module in two
    namespaces, or a module renamed in place, makes calls of another module, which count
    apart. The name, not the globals: a site must not keep a namespace alive.)"""

    __slots__ = ("binding", "callee", "caller", "check", "counted", "name")
    others: Mapping[int, Clean] = MappingProxyType({})  # see _Several

    def __init__(self, caller: FrameType, callee: Entry, check: Check | None, counted: Counted):
        self.caller = caller.f_code
        self.name = dict.get(caller.f_globals, "__name__")
        self.callee = callee.code
        self.counted = counted
        self.check = check
        self.binding = _binding_of(check)


class _Several:
    """The clean sites of several callers at one offset, by id() of the caller's code: its
    `caller` matches no frame's code, so a lookup goes on to `others`, as it does (and
    finds nothing) for a `Clean` of another caller."""

    __slots__ = ("caller", "others")

    def __init__(self, first: Clean) -> None:
        self.caller = None
        self.others: dict[int, Clean] = {id(first.caller): first}


#: f_lasti -> the clean site of the one caller with one there, else a _Several
table: dict[int, Clean | _Several] = {}
_size = [0]

# What is static about a call made directly by the user's code at one call site (the
# user's Site, the caller, that it is direct): worked out once, so that a repeat breach
# there is recorded without walking the stack again. id(caller code) -> {f_lasti: entry}
statics: dict[int, dict[int, tuple[CodeType, CodeType, object, dict]]] = {}


class Repeat:
    """A call site whose calls one tracer answers by calling `answer` (see `answer_repeat`)."""

    __slots__ = (
        "answer", "binding", "callee", "caller", "check", "globals", "name", "op", "tracer"
    )  # fmt: skip

    def __init__(
        self,
        caller: FrameType,
        callee: Entry,
        check: Check | None,
        tracer: object,
        answer: Callable[[], object],
    ) -> None:
        self.caller = caller.f_code
        # The very globals, and the very ``__name__`` object they hold: a name changed in
        # place changes the user's site; a copy of the globals is judged in full again.
        self.globals = caller.f_globals
        self.name = dict.get(caller.f_globals, "__name__")
        self.callee = callee.code
        self.op = callee.op
        self.check = check
        self.binding = _binding_of(check)
        self.tracer = tracer
        self.answer = answer


#: id(caller code) -> {f_lasti: Repeat}
repeats: dict[int, dict[int, Repeat]] = {}


class Quiet:
    """For the tracers of one thread among one context's tuple of running tracers: the
    tracers of that thread, the answers of `counting` asked so far, and, for each kind of
    operation, the one of them watching it (None: several). Made whole by `quiet` before
    it is published, and replaced, not changed, but for `mine`, which only grows: another
    thread reads one consistent answer. (Slots, not a named tuple: the callback reads
    three of its fields at every clean launch, and a slot is read faster.)"""

    __slots__ = ("alone", "mine", "own", "thread", "tracers")

    def __init__(self, tracers: tuple | None, thread: int, own: tuple, alone: dict) -> None:
        # (`quiet` sets these fields itself, without calling this: see there.)
        self.tracers, self.thread, self.own, self.alone = tracers, thread, own, alone
        self.mine: dict[Counted, tuple | None] = {}


_NOBODY = Quiet(None, 0, (), {})  # the answer for no tracers: matches no tuple


class _Last:
    """The last answer of `quiet` (a slot: the compiled callback reads it in place)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = _NOBODY


last = _Last()

# The functions from here to `answered` run in the core's callback, maybe a few frames
# short of the recursion limit: loops and C calls, no comprehension (a frame of its own
# on 3.11), no frame more than one deep.


def quiet(tracers: tuple, thread: int) -> Quiet:
    """The answer for the tracers of `thread` among `tracers`. Remembered for the last
    tuple: a context's tuple is replaced, not changed, when a tracer starts or stops
    there."""
    now = last.now
    if tracers is now.tracers and thread == now.thread:
        return now
    own, alone = [], {}
    for tracer in tracers:
        if tracer._thread == thread:
            own.append(tracer)
            for op in tracer.ops:
                alone[op] = None if op in alone else tracer
    now = object.__new__(Quiet)  # and its fields set here, as __init__ would: no frame more
    now.tracers, now.thread, now.own, now.mine, now.alone = tracers, thread, tuple(own), {}, alone
    last.now = now
    return now


def counting(now: Quiet, counted: Counted) -> tuple | None:
    """For the calls at a clean site that count as `counted`, under `now`: None where a
    tracer watching them asks for every call, or cannot tell whether it counts them (they
    take the full path); else the tracers that count them (those whose ``counts`` takes
    them), to skip all of them. Calls that no tracer of the thread watches concern none
    of them: ``()``. Each tracer's ``counts`` is asked once per pair (its `counted`):
    `mine` is lost when another thread's tracers take the last answer's place."""
    mine = now.mine
    if counted in mine:
        return mine[counted]
    pair, counting_it, full = (counted.op, counted.module), [], False
    try:
        for tracer in now.own:
            if counted.op not in tracer.ops:
                continue
            takes, asked = True, tracer.counted
            if tracer.counts is not None:
                if pair not in asked:
                    asked[pair] = tracer.counts(*pair)
                takes = asked[pair]
            full = full or tracer.every_call or takes is None
            if takes:
                counting_it.append(tracer)
    except RecursionError as error:  # no room so deep: judged in full (given room)
        if raised_by_handler(error):
            raise
        return None
    except Exception as error:  # a `counts` that fails: its tracer's on_call is given them
        if raised_by_handler(error):
            raise
        full = True
    answer = None if full else tuple(counting_it)
    mine[counted] = answer
    return answer


def answered(tracers: tuple, callee: CodeType, caller: FrameType | None, thread: int) -> bool:
    """Whether a call of `callee` from `caller` is at a remembered clean site, and every
    running tracer of `thread` that watches it lets it pass: then it is counted for those
    that count it and needs nothing more. (The sys.monitoring callback makes the same test
    inline: a call less per launch.)"""
    clean = caller and table.get(caller.f_lasti)
    if clean is not None and clean.caller is not caller.f_code:  # type: ignore[union-attr]
        clean = clean.others.get(id(caller.f_code))  # type: ignore[union-attr]
    if (
        clean is None
        or clean.callee is not callee
        or dict.get(caller.f_globals, "__name__") is not clean.name  # type: ignore[union-attr]
    ):
        return False
    try:  # a check that fails, near the recursion limit say: judged in full, given room
        if clean.check is not None and not clean.check(caller):  # type: ignore[union-attr]
            return False
    except Exception as error:
        if raised_by_handler(error):
            raise
        return False
    watching = counting(quiet(tracers, thread), clean.counted)  # type: ignore[union-attr]
    if watching is None:
        return False
    for tracer in watching:
        tracer.clean_calls += 1
    return True


def answer_repeat(tracers: tuple, callee: CodeType, caller: FrameType, thread: int) -> bool:
    """Whether a call of `callee` from `caller` is made at a remembered repeat site the
    same way (the same caller code, globals and module name, its check passing) while
    the tracer that remembered it is the only running one of `thread` that watches the
    call, and its answer, called in place of judging the call, takes it."""
    code = caller.f_code  # read once: a frame's fields cost a lookup each (3.13)
    sites = repeats.get(id(code))
    known = sites and sites.get(caller.f_lasti)
    if (
        not known
        or known.caller is not code
        or known.callee is not callee
        or known.globals is not caller.f_globals
        or dict.get(known.globals, "__name__") is not known.name
    ):
        return False
    now = last.now  # quiet's answer, inline where it is the last one (a call less)
    if tracers is not now.tracers or thread != now.thread:
        now = quiet(tracers, thread)
    if now.alone.get(known.op) is not known.tracer:
        return False
    try:  # as on the clean path
        if known.check is not None and not known.check(caller):
            return False
    except Exception as error:
        if raised_by_handler(error):
            raise
        return False
    try:
        return known.answer() is not False  # False: it refused, nothing recorded
    except RecursionError as error:  # no room so deep: fails on entry, judged in full
        if raised_by_handler(error):
            raise
        return False


def remember_repeat(
    caller: FrameType,
    callee: Entry,
    check: Check | None,
    tracer: object,
    answer: Callable[[], object],
) -> None:
    """Let `tracer` answer later calls of `callee` at `caller`'s site (see `answer_repeat`)."""
    _put(repeats, caller, Repeat(caller, callee, check, tracer, answer))


def _drop_repeats(tracer: object) -> None:
    """Forget the sites `tracer` answers (it stops). Another thread may change the table
    meanwhile: it is read from copies, and an entry dropped by mistake only costs a full
    judging of the next call there."""
    for key, sites in list(repeats.items()):
        for lasti, known in list(sites.items()):
            if known.tracer is tracer and sites.pop(lasti, None) is not None:
                _size[0] -= 1
        if not sites:
            repeats.pop(key, None)


def learn(caller: FrameType, callee: Entry, stream: str, made_by_warp: bool = False) -> None:
    """Remember the call site `caller` is executing as clean for `callee`, when the site
    can be recognised again cheaply. `stream` names the callee's stream parameter. A
    launch or copy that Warp's own code makes (`made_by_warp`) is learnt the same way, not
    by its site alone: Warp calls the user's callables too (``Tape.backward`` runs the
    recorded functions at one line), and the line does not say what they pass. Its calls
    are counted for no module: they are made for a caller further up."""
    site = call_site(caller.f_code, caller.f_lasti)
    if site is None:
        return
    if site.static:
        by_keyword = stream in site.shape.kwargs.items  # type: ignore[attr-defined]
        check = _check_for(site, callee.code, caller, by_keyword)
    else:
        check = _spread_check(site, callee, stream, caller)
    if check is False or (check is not None and not check(caller)):  # type: ignore[operator]
        return  # a check that the call it is learnt from fails vouches for other calls
    module = None if made_by_warp else module_name(caller.f_globals)  # as its Site names it
    counted = counted_as(callee.op, module)
    _remember(caller, callee, check, counted)  # type: ignore[arg-type]


def repeat_check(caller: FrameType, callee: CodeType) -> Check | bool:
    """How to tell that a later call at `caller`'s call site calls `callee` the same way,
    made directly with the same spelled-out arguments: a check of the caller's frame, or
    False where that cannot be told cheaply (a ``*``/``**`` part, a callable made in
    place, a call through C code)."""
    site = call_site(caller.f_code, caller.f_lasti)
    if site is None or not site.static or site.direct is False:
        return False
    check = _callable_check(site.shape.func, callee, caller)
    if check is False or not check(caller):  # type: ignore[operator]
        return False  # it would vouch for calls made another way than this one
    return check


def learn_site(caller: FrameType, callee: Entry) -> None:
    """Remember a call site in Warp's own code as clean for `callee` (a memset or a
    ScopedStream that Warp makes, a readback served by the watched function making it,
    each clean whatever its arguments):
    the caller's code object and offset decide it, under the very module name it ran with
    (see Clean: Warp's code run under another name, as ``__main__`` say, is not Warp's own,
    see `sites.is_internal`)."""
    _remember(caller, callee, None, counted_as(callee.op, None))


def _remember(caller: FrameType, callee: Entry, check: Check | None, counted: Counted) -> None:
    if _size[0] >= _LIMIT:
        forget()
    clean, lasti = Clean(caller, callee, check, counted), caller.f_lasti
    there = table.get(lasti)
    if there is None or there.caller is clean.caller:
        if there is None:
            _size[0] += 1
        table[lasti] = clean
        return
    several = there if type(there) is _Several else _Several(there)  # type: ignore[arg-type]
    if id(clean.caller) not in several.others:
        _size[0] += 1
    several.others[id(clean.caller)] = clean
    table[lasti] = several


def _put(tables: dict[int, dict[int, object]], caller: FrameType, entry: object) -> None:
    """Keep `entry` for the call site `caller` is executing, in one of the tables, all of
    which count against one bound (they start over together when it is reached)."""
    if _size[0] >= _LIMIT:
        forget()
    sites = tables.setdefault(id(caller.f_code), {})
    if caller.f_lasti not in sites:
        _size[0] += 1
    sites[caller.f_lasti] = entry


def let_go(tracer: object) -> None:
    """Hold `tracer` no longer (it stops): drop its repeat sites, and the last `quiet`
    answer if it names it (that would keep the tracer, and its guard, alive)."""
    if repeats:
        _drop_repeats(tracer)
    # The answer's tracers are among the tuple it answers for. By identity: no __eq__ of a
    # Tracer subclass runs.
    for held in last.now.tracers or ():
        if held is tracer:
            last.now = _NOBODY
            break


def forget() -> None:
    """Empty the tables (the core disarmed, or one is full)."""
    table.clear()
    statics.clear()
    repeats.clear()
    _counted.clear()
    _size[0] = 0
    last.now = _NOBODY  # it holds tracers, so guards' records


def module_key(globals_: dict) -> object:
    """What tells one module's globals from another's: its ``__name__``, or, where that
    is not a plain string (whose comparison could run code), the dict's identity."""
    name = dict.get(globals_, "__name__")
    return name if type(name) is str else id(globals_)


def static_fields(caller: FrameType, callee: CodeType) -> dict | None:
    """The fields remembered for a direct call from `caller`'s site to `callee`."""
    sites = statics.get(id(caller.f_code))
    known = sites and sites.get(caller.f_lasti)
    if (
        known
        and known[0] is caller.f_code
        and known[1] is callee
        and known[2] == module_key(caller.f_globals)  # the same code, other globals
    ):
        return dict(known[3])
    return None


def remember_fields(caller: FrameType, callee: CodeType, fields: dict) -> None:
    """Remember the static fields of a direct call from `caller`'s site to `callee`."""
    module = module_key(caller.f_globals)
    _put(statics, caller, (caller.f_code, callee, module, fields))  # type: ignore[arg-type]


def _check_for(
    site: CallSite, callee: CodeType, caller: FrameType, by_keyword: bool
) -> Check | bool | None:
    """None: the offset proves it (a direct Python call, stream by keyword); a check that
    re-reads the callable; False: the site cannot be recognised cheaply."""
    if site.direct and by_keyword:
        return None  # a function or a bound method called directly: keywords reach it
    if site.direct is False:
        return False  # called through C code on 3.11/3.12: its callable may change
    return _callable_check(site.shape.func, callee, caller)


_MAX_PATH = 4  # attributes and items read on the way to a receiver (``self.a.b.launch``)


def _callable_check(func: object, callee: CodeType, caller: FrameType) -> Check | bool:
    # ``name(...)``, ``module.name(...)`` and ``obj.method(...)``, ``obj`` a local or a
    # global, or reached from one through instances' own attributes and items of lists,
    # tuples and dicts (``self.cmd.launch``, ``self.cmds[i].launch``,
    # ``self.graphs["fwd"].launch``), in a function or a module's body: the attribute
    # may be loaded as a method (`Method`) or as a plain attribute (a `Ref` step), by
    # version.
    if type(func) is Method and type(func.receiver) is Ref:
        ref, attribute = func.receiver, func.name
        steps = ref.steps
    elif type(func) is Ref and func.steps:
        ref, (*steps, (kind, attribute)) = func, func.steps
        if kind != "attr":
            return False
    elif type(func) is Ref:
        ref, attribute, steps = func, None, ()
    else:
        return False
    if type(caller.f_globals) is not dict:
        return False  # a dict subclass's own __getitem__ would answer LOAD_GLOBAL
    if len(steps) > _MAX_PATH:
        return False
    scope = ref.scope
    if scope == "name" and not _module_body(caller):
        return False  # a class body, or exec() with locals of its own: read there first
    if scope in ("global", "name") and not steps:
        binding = _binding(ref.name, attribute, callee, caller, scope == "name")
        if binding is not False or attribute is None:
            return binding
    if scope in ("fast", "global", "name") and attribute is not None:
        return _bound_method_check(scope, ref.name, tuple(steps), attribute, callee, caller)
    return False


def _module_body(frame: FrameType) -> bool:
    """Whether `frame` runs with its globals as its locals (a module's body), where
    LOAD_NAME finds a global as LOAD_GLOBAL does. (Not a proxy there: the dict itself.)"""
    return frame.f_locals is frame.f_globals


def _binding(
    variable: str, attribute: str | None, callee: CodeType, caller: FrameType, module_body: bool
) -> Check | bool:
    """``name(...)`` or ``module.function(...)``: the name still binds the same function,
    or the same module that still binds it (`Binding.holds`)."""
    bound = dict.get(caller.f_globals, variable)
    if attribute is None:
        binding = Binding(variable, bound, None, None, module_body)
    elif type(bound) is types.ModuleType:
        binding = Binding(variable, bound, attribute, bound.__dict__, module_body)
    else:
        return False
    target = binding.target
    if type(target) is not types.FunctionType or target.__code__ is not callee:
        return False
    return binding.holds


def _bound_method_check(
    scope: str,
    variable: str,
    path: tuple[tuple[str, object], ...],
    attribute: str,
    callee: CodeType,
    caller: FrameType,
) -> Check | bool:
    """``obj.method(...)``, `obj` a local or a global `variable` or reached from one by
    `path` (the `Ref`'s steps), each attribute an instance's own, each item a list's, a
    tuple's or a dict's (`Item`): the same classes, the last one defining the method
    itself, unshadowed by its instance's own ``__dict__`` (`Receiver`)."""
    steps, obj = _walk(scope, variable, path, caller)
    if obj is _GONE:
        return False
    cls = type(obj)
    target = _type_dict(cls).get(attribute)
    if type(target) is not types.FunctionType or target.__code__ is not callee:
        return False
    if not _generic_attributes(cls):
        return False
    return Receiver(scope, variable, steps, cls, attribute, target)


def _walk(
    scope: str, variable: str, path: tuple[tuple[str, object], ...], caller: FrameType
) -> tuple[tuple[Step | Item, ...], object]:
    """The steps that read a `Ref`'s `path` off its root (a local or a global
    `variable`) the way the site does, and the object they reach now, or `_GONE` where a
    step would not be read back that way."""
    obj = _root(scope, variable, caller)
    steps = []
    for kind, key in path:
        step = Step.learnt(obj, key) if kind == "attr" else Item.learnt(obj, key, scope)  # type: ignore[arg-type]
        obj = _GONE if step is None else step.read(obj, caller)
        if obj is _GONE:
            break
        steps.append(step)
    return tuple(steps), obj


def _follow(scope: str, variable: str, steps: tuple[Step | Item, ...], frame: FrameType) -> object:
    """What `steps` (see `_walk`) reach from their root in `frame` now, or `_GONE`."""
    obj = _root(scope, variable, frame)
    for step in steps:
        obj = step.read(obj, frame)
    return obj


def _spread_check(site: CallSite, callee: Entry, stream: str, caller: FrameType) -> Check | bool:
    """A call with ``*`` or ``**`` parts, each a local's or a global's value or reached
    from one as a receiver is (`Spread`); False where it cannot be read back that way."""
    shape = site.shape
    kwargs = shape.kwargs
    if site.direct is False or type(kwargs) is not Kwargs:
        return False  # called through C code on 3.11/3.12; or a keyword dict lost track of
    args = _positional_parts(shape.args)
    if not all(type(part) is Star or type(part) is str for part in kwargs.items):  # type: ignore[attr-defined]
        return False  # a keyword read back (``**{name: value}``)
    sequences = tuple(_spread_part(item.value, caller) for item in args if type(item) is Star)
    mappings = tuple(_spread_part(p.value, caller) for p in kwargs.items if type(p) is Star)  # type: ignore[attr-defined]
    loads = _callable_check(shape.func, callee.code, caller)
    if loads is False or None in sequences or None in mappings:
        return False
    parameters = callee.parameters
    return Spread(
        loads,  # type: ignore[arg-type]
        stream,
        parameters.index(stream) if stream in parameters else len(parameters),
        sum(type(item) is not Star for item in args) + (type(loads) is Receiver),
        frozenset(part for part in kwargs.items if type(part) is str),  # type: ignore[attr-defined]
        sequences,  # type: ignore[arg-type]
        mappings,  # type: ignore[arg-type]
    )


def _positional_parts(args: object) -> tuple[object, ...]:
    """The items of a call's positional arguments: values spelled out, and `Star` parts
    (a sequence passed as is is one; a constant tuple, its items)."""
    if type(args) is Args:
        return args.items  # type: ignore[attr-defined]
    if type(args) is Const and type(args.value) is tuple:  # type: ignore[attr-defined]
        return args.value  # type: ignore[attr-defined]
    return (Star(args),)


def _spread_part(value: object, caller: FrameType) -> Part | None:
    if type(value) is not Ref or len(value.steps) > _MAX_PATH:  # type: ignore[attr-defined]
        return None
    scope = value.scope  # type: ignore[attr-defined]
    if scope not in ("fast", "global", "name") or (scope == "name" and not _module_body(caller)):
        return None  # a class body, or exec() with locals of its own
    steps, obj = _walk(scope, value.name, value.steps, caller)  # type: ignore[attr-defined]
    return None if obj is _GONE else Part(scope, value.name, steps)  # type: ignore[attr-defined]


class Part:
    """A ``*`` or ``**`` part of a call: a local's or a global's value (in a module's
    body, read there from its globals), or reached from one by `steps` (see `_walk`).
    The compiled callback reads `variable`, `steps` and the two flags of `scope`."""

    __slots__ = ("from_globals", "module_body", "scope", "steps", "variable")

    def __init__(self, scope: str, variable: str, steps: tuple[Step | Item, ...]) -> None:
        self.scope, self.variable, self.steps = scope, variable, steps
        self.from_globals, self.module_body = scope != "fast", scope == "name"

    def read(self, frame: FrameType) -> object:
        return _follow(self.scope, self.variable, self.steps, frame)


class Spread:
    """The check of a call site with ``*`` or ``**`` parts: its callable still loads the
    watched function (`loads`: a `Binding`'s ``holds`` or a `Receiver`), and its parts,
    read again from the frame as the full path reads them (exact tuples or lists; exact
    dicts whose keys are all exact strings: any other part leaves the call to the full
    path, which cannot tell what it passed either), still pass `stream`: by keyword,
    spelled out (`keywords`) or in a dict, or by position (its index `position` among the
    callee's positional parameters, reached by the `positional` arguments spelled out,
    a bound method's ``self`` included, and the sequences' items)."""

    __slots__ = ("keywords", "loads", "mappings", "position", "positional", "sequences", "stream")

    def __init__(
        self,
        loads: Check,
        stream: str,
        position: int,
        positional: int,
        keywords: frozenset[str],
        sequences: tuple[Part, ...],
        mappings: tuple[Part, ...],
    ) -> None:
        self.loads, self.stream, self.position = loads, stream, position
        self.positional, self.keywords = positional, keywords
        self.sequences, self.mappings = sequences, mappings

    def __call__(self, frame: FrameType) -> bool:
        if not self.loads(frame):
            return False
        positional = self.positional
        for part in self.sequences:
            value = part.read(frame)
            if type(value) is not tuple and type(value) is not list:
                return False
            positional += len(value)  # type: ignore[arg-type]
        passed = positional > self.position or self.stream in self.keywords
        for part in self.mappings:
            value = part.read(frame)
            if type(value) is not dict:
                return False
            keys = list(dict.keys(value))  # type: ignore[arg-type]  # one C call: no thread cuts in
            if not all(map(_is_str, map(type, keys))):  # C calls alone: no frame
                return False
            passed = passed or self.stream in keys  # exact strings: str.__eq__ alone
        return passed


_GONE = object()  # a root or an attribute that is not there (never an instance of a class)
# Class attributes an instance's own attribute of the same name hides, and whose type can
# never become a descriptor (built in): a dataclass field's default, say.
_INERT = (type(None), bool, int, float, complex, str, bytes)


def _inert(value: object) -> bool:
    kind = type(value)
    return any(kind is inert for inert in _INERT)  # by identity: no metaclass __eq__ runs


def _root(scope: str, variable: str, frame: FrameType) -> object:
    """The local, or the global (a plain dict's; never a builtin; in a module's body,
    read there as its local), a receiver path starts from, or `_GONE`."""
    if scope == "fast":
        try:
            return readback.frame_local(frame, variable, _GONE)
        except readback.Unresolved:
            return _GONE
    if scope == "name" and not _module_body(frame):
        return _GONE
    globals_ = frame.f_globals
    return dict.get(globals_, variable, _GONE) if type(globals_) is dict else _GONE


def _generic_attributes(cls: type) -> bool:
    """Whether `cls`'s instances' attributes are found the generic way (no
    ``__getattribute__`` of their own) and first in `cls` itself (a metaclass's ``mro()``
    may put another class before it, which the checks would not look at)."""
    mro = _type_mro(cls)
    getattribute = class_lookup(cls, "__getattribute__")
    return bool(mro) and mro[0] is cls and getattribute is object.__getattribute__


def _shadow(cls: type, name: str) -> tuple:
    """What `cls` holds under `name`, first in its MRO: ``()`` for nothing, else ``(value,)``."""
    for klass in _type_mro(cls):
        space = _type_dict(klass)
        if name in space:
            return (space[name],)
    return ()


class _Instance:
    """An object whose attributes are found the generic way (`readback.generic_attribute`,
    which never makes its ``__dict__``): still an instance of `cls`, whose MRO is still
    `mro`, with no ``__getattribute__`` given since to one of its classes that can change
    (`changeable`: not built in). The compiled callback (``_fastclean.c``) makes the same
    tests on these fields, and keeps in `version` the class's version tag when its
    class-level tests last passed: CPython gives a class a new tag at every change to it
    or a base, so while the tag is the same they pass again, and only the instance's are
    made."""

    __slots__ = ("changeable", "cls", "mro", "version")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.mro = _type_mro(cls)
        self.changeable = tuple(k for k in self.mro if _type_flags(k) & _HEAPTYPE)
        self.version = 0  # none yet: 0 is no class's tag

    def still(self, obj: object) -> bool:
        """Whether `obj` is still an instance of `cls`, whose MRO is still `mro`. Asked
        again after lookups in a class's or an instance's dict: a stored key of the
        user's type may run its ``__eq__`` in them, and that may change either."""
        return type(obj) is self.cls and _type_mro(self.cls) is self.mro

    def generic(self, obj: object) -> bool:
        """Whether `obj` is still such an instance, its attributes found the generic way."""
        if not self.still(obj):
            return False  # another class, or its bases were changed
        for klass in self.changeable:
            if "__getattribute__" in _type_dict(klass):
                return False  # given one since (by the class or a base)
        return self.still(obj)

    def found(self, obj: object, name: str) -> object:
        """``obj.<name>`` found the generic way where `obj` is still such an instance,
        else `_GONE`."""
        if not self.generic(obj):
            return _GONE
        try:
            return readback.generic_attribute(obj, name)
        except readback.Unresolved:
            return _GONE


class Step(_Instance):
    """One attribute on a receiver's path (``self.cmd``): `name`, found the generic way
    behind nothing its classes hold but the `shadow` they held when it was learnt (see
    `_shadow`: nothing, or an inert value, found where the object has none of its own)."""

    __slots__ = ("name", "shadow")

    def __init__(self, cls: type, name: str, shadow: tuple) -> None:
        super().__init__(cls)
        self.name, self.shadow = name, shadow

    @classmethod
    def learnt(cls, obj: object, name: str) -> Step | None:
        """The step reading `name` off `obj`'s kind of object, or None where it would not
        be read back that way (a property, slots, a ``__getattribute__``); `read` tells
        whether `obj` itself has the attribute."""
        kind = type(obj)
        if type(name) is not str or not _generic_attributes(kind):
            return None
        shadow = _shadow(kind, name)
        return None if shadow and not _inert(shadow[0]) else cls(kind, name, shadow)

    def read(self, obj: object, frame: FrameType) -> object:
        """``obj.<name>`` as the call loads it, or `_GONE` where this step no longer holds."""
        shadow = _shadow(self.cls, self.name)
        if len(shadow) != len(self.shadow) or (shadow and shadow[0] is not self.shadow[0]):
            return _GONE  # the class was given an attribute of that name since
        value = self.found(obj, self.name)
        return value if self.still(obj) else _GONE


class Item:
    """One item on a receiver's or a part's path (``self.cmds[0]``, ``cmds[i]``,
    ``self.graphs["fwd"]``, ``**CONFIG[name]``): of an exact list or tuple at a
    non-negative int, or of an exact dict at an exact str or int; the `key` a constant, or
    what a `variable` holds (the caller's local, or its global where `from_globals`: in a
    module's body, whose locals the `Receiver` checks are its globals). Read as the call's
    subscript reads it, where that runs no code of the user's (a dict's item is looked
    for among its keys of the key's own type, as the full path does, see
    `readback.item`); anything else (a negative or bool key, the user's container, a key
    found another way) is judged in full."""

    __slots__ = ("from_globals", "key", "variable")

    def __init__(self, key: int | str | None, variable: str | None, from_globals: bool) -> None:
        self.key, self.variable, self.from_globals = key, variable, from_globals

    @classmethod
    def learnt(cls, obj: object, key: object, scope: str) -> Item | None:
        """The step reading `key` (a `Const` or a `Ref` of the call site) off a list, a
        tuple or a dict, or None where it would not be read back that way; the
        receiver's root is read in `scope`."""
        kind = type(obj)
        if kind is not list and kind is not tuple and kind is not dict:
            return None
        if type(key) is Const:
            value = key.value  # type: ignore[attr-defined]
            if kind is dict and (type(value) is str or type(value) is int):
                return cls(value, None, False)
            return cls(value, None, False) if type(value) is int and value >= 0 else None
        if type(key) is not Ref or key.steps:  # type: ignore[attr-defined]
            return None
        # A name in a module's body is read there from its globals (see Receiver).
        if key.scope == "fast" or key.scope == "global" or scope == key.scope == "name":  # type: ignore[attr-defined]
            return cls(None, key.name, key.scope != "fast")  # type: ignore[attr-defined]
        return None

    def read(self, obj: object, frame: FrameType) -> object:
        """``obj[key]`` as the call loads it, or `_GONE` where this step no longer holds."""
        key = self.key
        if key is None:
            key = _root("global" if self.from_globals else "fast", self.variable, frame)  # type: ignore[arg-type]
        kind = type(obj)
        if kind is dict:
            return _dict_item(obj, key)  # type: ignore[arg-type]
        if kind is not list and kind is not tuple:
            return _GONE
        if type(key) is not int or key < 0 or key >= len(obj):  # type: ignore[arg-type,operator]
            return _GONE
        return obj[key]  # type: ignore[index]


def _dict_item(mapping: dict, key: object) -> object:
    """``mapping[key]`` for an exact str or int `key` (the keys the compiled filter reads),
    found as the full path finds it (`readback.item`: among the stored keys of the key's
    own type, in a dict of at most `DICT_SCAN_LIMIT` items; a lookup by hash would run
    the ``__eq__`` of a stored key of the user's type); `_GONE` where it is not."""
    if type(key) is not str and type(key) is not int:
        return _GONE
    try:
        return readback.item(mapping, key)
    except readback.Unresolved:
        return _GONE


DICT_SCAN_LIMIT = readback.DICT_SCAN_LIMIT  # read here by the compiled filter


class Receiver(_Instance):
    """The check of an ``obj.method(...)`` site: `obj`, the local or global (`scope`:
    ``"fast"``, ``"global"``, or ``"name"`` in a module's body, see `_module_body`)
    `variable`, or reached from it by the `path` of `Step` and `Item`, is still an instance of
    `cls`, whose own namespace binds `attribute` to `target` (the watched function), and
    found the generic way, it is still `target` bound to `obj` (no other value of the
    instance's own shadows it; see `_Instance`)."""

    __slots__ = (
        "attribute",
        "from_globals",
        "module_body",
        "namespace",
        "path",
        "scope",
        "target",
        "variable",
    )

    def __init__(
        self,
        scope: str,
        variable: str,
        path: tuple[Step | Item, ...],
        cls: type,
        attribute: str,
        target: object,
    ) -> None:
        super().__init__(cls)
        self.scope = scope
        self.from_globals = scope != "fast"  # the compiled test reads these two flags
        self.module_body = scope == "name"
        self.variable, self.path, self.attribute, self.target = variable, path, attribute, target
        self.namespace = _type_dict(cls)

    def __call__(self, frame: FrameType) -> bool:
        obj = _follow(self.scope, self.variable, self.path, frame)
        if type(obj) is not self.cls or self.namespace.get(self.attribute) is not self.target:
            return False
        method = self.found(obj, self.attribute)
        return (
            type(method) is types.MethodType
            and _method_function(method) is self.target
            and _method_self(method) is obj
            and self.still(obj)
        )


_is_str = partial(operator.is_, str)
