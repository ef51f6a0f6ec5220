"""Which arguments did the caller pass explicitly? Read off its call instruction.

A callee's frame holds the *bound* arguments, so ``stream=None`` passed by the caller and
``stream`` left at its default ``None`` look the same there. The caller's bytecode does not
lie: the call instruction it is executing says how many positional arguments it passed and
by which keywords (``KW_NAMES`` + ``CALL`` on 3.11/3.12, ``CALL_KW`` on 3.13), and for a
``CALL_FUNCTION_EX`` the instructions before it say how the ``*args`` tuple and ``**kw``
dict were put together, whose starred parts are then read back from the caller's frame.

Each caller code object is analysed once, by a small forward simulation of its value stack
that tracks where every call's callable and arguments came from. Anything the simulation
does not model (a branch merging two stacks, an unusual opcode) turns into "unknown",
never into a guess; an unknown call shape makes `explicit_arguments` return ``None`` and
the rules fall back on the bound value.

Python-to-Python calls and calls made through C (``functools.partial``, ``map``, a class
instantiation) are told apart: on 3.11/3.12 the caller's ``f_lasti`` rests on the CALL's
last inline cache entry for the former and on the CALL itself for the latter; on 3.13 it is
always on the CALL, so the callable is looked up again from the caller's frame and matched
against the callee.
"""

from __future__ import annotations

import dis
import functools
import inspect
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType, FrameType

_PY = sys.version_info[:2]


class _Token:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN = _Token("UNKNOWN")  # a stack value the simulation cannot describe
NULL = _Token("NULL")  # the NULL the compiler pushes beside a callable


@dataclass(frozen=True)
class Ref:
    """A value that can be read again from the caller's frame: a name, then steps."""

    scope: str  # "fast" (locals and cells), "global", "name" (module or class body)
    name: str
    steps: tuple[tuple[str, object], ...] = ()  # ("attr", name) or ("item", constant)

    def then(self, kind: str, key: object) -> Ref:
        return Ref(self.scope, self.name, (*self.steps, (kind, key)))


@dataclass(frozen=True)
class Const:
    value: object


@dataclass(frozen=True)
class Method:
    """``receiver.name`` loaded to be called: the receiver may be bound as ``self``."""

    receiver: object
    name: str


@dataclass(frozen=True)
class Star:
    """A starred part of an argument list: ``*value`` or ``**value``."""

    value: object


@dataclass(frozen=True)
class Args:
    """A positional argument list being built: values and `Star` parts."""

    items: tuple[object, ...]


@dataclass(frozen=True)
class Kwargs:
    """A keyword dict being built: literal names and `Star` (``**``) parts."""

    items: tuple[object, ...]


@dataclass(frozen=True)
class CallShape:
    """How one call instruction got its callable and its arguments."""

    func: object  # Ref, Method or UNKNOWN
    args: object  # Args, Ref or UNKNOWN
    kwargs: object  # Kwargs, Ref or UNKNOWN
    has_caches: bool  # lasti on a cache entry means a direct Python call

    @property
    def static(self) -> bool:
        """Whether the arguments are all spelled out (no ``*`` or ``**`` part)."""
        return (
            isinstance(self.args, Args)
            and not any(isinstance(item, Star) for item in self.args.items)
            and isinstance(self.kwargs, Kwargs)
            and all(isinstance(item, str) for item in self.kwargs.items)
        )


class _Site:
    """A call instruction, seen from one place where the caller's ``f_lasti`` can rest."""

    __slots__ = ("direct", "plain", "quick", "shape", "static")

    def __init__(self, shape: CallShape, direct: bool | None) -> None:
        self.shape = shape
        self.direct = direct  # True: a Python call; False: through C; None: cannot tell
        self.static = shape.static
        self.quick = _quick_reader(shape.func)
        # id(callee code) -> explicit names, for a plain function called with spelled-out
        # arguments: the answer depends on nothing else, so it is worked out once.
        self.plain: dict[int, frozenset[str]] = {}


def _quick_reader(func: object) -> Callable[[FrameType], object] | None:
    """A fast way to read the two commonest callables, ``name(...)`` and
    ``module.name(...)``, back from a frame (`_MISSING` when it does not apply)."""
    if type(func) is Ref and func.scope == "global" and not func.steps:
        name = func.name
        return lambda frame: frame.f_globals.get(name, _MISSING)
    receiver = getattr(func, "receiver", None)
    if type(receiver) is Ref and receiver.scope == "global" and not receiver.steps:
        module_name, attribute = receiver.name, func.name  # type: ignore[attr-defined]

        def read(frame: FrameType) -> object:
            module = frame.f_globals.get(module_name)
            if type(module) is not types.ModuleType:
                return _MISSING
            return module.__dict__.get(attribute, _MISSING)

        return read
    return None


# id(code) -> (code, {f_lasti: site}). Keyed by id: hashing a code object hashes its
# bytecode, microseconds for a large function.
_analyses: dict[int, tuple[CodeType, dict[int, _Site]]] = {}


class _Unresolved(Exception):
    """A `Ref` or shape could not be read back from the frame."""


# --- analysis -------------------------------------------------------------------------

# Opcodes with a known (pops, pushes) whose results the simulation need not describe.
_SIMPLE_OPS = {
    "NOP": (0, 0), "RESUME": (0, 0), "CACHE": (0, 0), "EXTENDED_ARG": (0, 0),
    "PRECALL": (0, 0), "COPY_FREE_VARS": (0, 0), "MAKE_CELL": (0, 0), "NOT_TAKEN": (0, 0),
    "POP_TOP": (1, 0), "STORE_FAST": (1, 0), "STORE_NAME": (1, 0), "STORE_GLOBAL": (1, 0),
    "STORE_DEREF": (1, 0), "STORE_ATTR": (2, 0), "STORE_SUBSCR": (3, 0),
    "DELETE_FAST": (0, 0), "DELETE_NAME": (0, 0), "DELETE_GLOBAL": (0, 0),
    "DELETE_DEREF": (0, 0), "DELETE_ATTR": (1, 0), "DELETE_SUBSCR": (2, 0),
    "BINARY_OP": (2, 1), "COMPARE_OP": (2, 1), "IS_OP": (2, 1), "CONTAINS_OP": (2, 1),
    "UNARY_NEGATIVE": (1, 1), "UNARY_NOT": (1, 1), "UNARY_INVERT": (1, 1), "TO_BOOL": (1, 1),
    "GET_ITER": (1, 1), "GET_LEN": (1, 2), "FORMAT_SIMPLE": (1, 1), "CONVERT_VALUE": (1, 1),
    "FORMAT_WITH_SPEC": (2, 1), "LOAD_BUILD_CLASS": (0, 1), "LOAD_ASSERTION_ERROR": (0, 1),
    "LOAD_CLOSURE": (0, 1), "RETURN_GENERATOR": (0, 1), "SET_FUNCTION_ATTRIBUTE": (2, 1),
    "POP_JUMP_IF_FALSE": (1, 0), "POP_JUMP_IF_TRUE": (1, 0), "POP_JUMP_IF_NONE": (1, 0),
    "POP_JUMP_IF_NOT_NONE": (1, 0), "POP_JUMP_FORWARD_IF_FALSE": (1, 0),
    "POP_JUMP_FORWARD_IF_TRUE": (1, 0), "POP_JUMP_FORWARD_IF_NONE": (1, 0),
    "POP_JUMP_FORWARD_IF_NOT_NONE": (1, 0), "POP_JUMP_BACKWARD_IF_FALSE": (1, 0),
    "POP_JUMP_BACKWARD_IF_TRUE": (1, 0), "POP_JUMP_BACKWARD_IF_NONE": (1, 0),
    "POP_JUMP_BACKWARD_IF_NOT_NONE": (1, 0), "JUMP_IF_FALSE_OR_POP": (1, 0),
    "JUMP_IF_TRUE_OR_POP": (1, 0), "FOR_ITER": (1, 2),
}  # fmt: skip

# After these the next instruction is reached only by a jump (or not at all).
_TERMINATORS = {
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT",
    "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
}  # fmt: skip

_LIST_TO_TUPLE = 6  # CALL_INTRINSIC_1 operand (3.12+)


class _Stack:
    """The simulated value stack of one basic block; popping past its start gives UNKNOWN."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def push(self, *values: object) -> None:
        self.items.extend(values)

    def pop(self) -> object:
        return self.items.pop() if self.items else UNKNOWN

    def popn(self, n: int) -> list[object]:
        return [self.pop() for _ in range(n)][::-1]

    def peek(self, depth: int) -> object:
        return self.items[-depth] if len(self.items) >= depth else UNKNOWN

    def replace(self, depth: int, value: object) -> None:
        if len(self.items) >= depth:
            self.items[-depth] = value

    def forget(self) -> None:
        self.items.clear()


def _callable_of(first: object, second: object) -> object:
    """The callable among the two slots below a call's arguments (the other is NULL or self)."""
    if isinstance(first, Method) or (second is NULL and first is not NULL):
        return first
    if isinstance(second, Method) or (first is NULL and second is not NULL):
        return second
    return UNKNOWN


def _attr_of(value: object, name: str) -> object:
    return value.then("attr", name) if isinstance(value, Ref) else UNKNOWN


def _push_method(stack: _Stack, receiver: object, name: str) -> None:
    # 3.11/3.12 push [method|NULL, self|attr], 3.13 [method|attr, self|NULL]: either way
    # one slot describes the callable and `_callable_of` finds it beside a NULL.
    stack.push(Method(receiver, name), NULL)


def _extend(stack: _Stack, depth: int, kind: type, part: object) -> None:
    target = stack.peek(depth)
    if isinstance(target, kind):
        extra = part.items if isinstance(part, kind) else (Star(part),)
        stack.replace(depth, kind(target.items + extra))
    else:
        stack.replace(depth, UNKNOWN)


def _step(ins: dis.Instruction, stack: _Stack, code: CodeType, state: dict) -> CallShape | None:
    """Apply one instruction to the stack; return the shape when it is a call."""
    op, arg, argval = ins.opname, ins.arg, ins.argval
    if op in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_DEREF",
              "LOAD_CLASSDEREF"):  # fmt: skip
        stack.push(Ref("fast", argval))
    elif op == "LOAD_FAST_LOAD_FAST":
        stack.push(*(Ref("fast", name) for name in argval))
    elif op == "STORE_FAST_LOAD_FAST":
        stack.pop()
        stack.push(Ref("fast", argval[1]))
    elif op == "LOAD_GLOBAL":
        ref = Ref("global", argval)
        if arg & 1:
            stack.push(*((ref, NULL) if _PY >= (3, 13) else (NULL, ref)))
        else:
            stack.push(ref)
    elif op == "LOAD_NAME":
        stack.push(Ref("name", argval))
    elif op == "LOAD_CONST":
        stack.push(Const(argval))
    elif op == "PUSH_NULL":
        stack.push(NULL)
    elif op == "LOAD_METHOD":
        _push_method(stack, stack.pop(), argval)
    elif op == "LOAD_ATTR":
        receiver = stack.pop()
        if _PY >= (3, 12) and arg & 1:
            _push_method(stack, receiver, argval)
        else:
            stack.push(_attr_of(receiver, argval))
    elif op == "BINARY_SUBSCR":
        key, obj = stack.pop(), stack.pop()
        ok = isinstance(obj, Ref) and isinstance(key, Const)
        stack.push(obj.then("item", key.value) if ok else UNKNOWN)
    elif op in ("BUILD_TUPLE", "BUILD_LIST"):
        stack.push(Args(tuple(stack.popn(arg))))
    elif op == "LIST_EXTEND":
        _extend(stack, arg, Args, stack.pop())
    elif op == "LIST_APPEND":
        value = stack.pop()
        target = stack.peek(arg)
        stack.replace(arg, Args((*target.items, value)) if isinstance(target, Args) else UNKNOWN)
    elif op == "LIST_TO_TUPLE" or (op == "CALL_INTRINSIC_1" and arg == _LIST_TO_TUPLE):
        pass  # the list becomes a tuple: same items
    elif op == "BUILD_MAP":
        keys = stack.popn(2 * arg)[::2]
        named = all(isinstance(k, Const) and isinstance(k.value, str) for k in keys)
        stack.push(Kwargs(tuple(k.value for k in keys)) if named else UNKNOWN)
    elif op == "BUILD_CONST_KEY_MAP":
        keys = stack.pop()
        stack.popn(arg)
        stack.push(Kwargs(tuple(keys.value)) if isinstance(keys, Const) else UNKNOWN)
    elif op in ("DICT_MERGE", "DICT_UPDATE"):
        _extend(stack, arg, Kwargs, stack.pop())
    elif op == "KW_NAMES":
        state["kwnames"] = code.co_consts[arg]
    elif op == "CALL":
        names, state["kwnames"] = state.get("kwnames", ()), ()
        return _call(stack, arg, tuple(names), has_caches=True)
    elif op == "CALL_KW":
        names = stack.pop()
        names = names.value if isinstance(names, Const) else None
        return _call(stack, arg, names, has_caches=False)
    elif op == "CALL_FUNCTION_EX":
        kwargs = stack.pop() if arg & 1 else Kwargs(())
        args = stack.pop()
        func = _callable_of(*stack.popn(2))
        stack.push(UNKNOWN)
        return CallShape(func, args, kwargs, has_caches=False)
    elif op == "COPY":
        stack.push(stack.peek(arg))
    elif op == "SWAP":
        top, other = stack.peek(1), stack.peek(arg)
        stack.replace(1, other)
        stack.replace(arg, top)
    elif op in _SIMPLE_OPS:
        pops, pushes = _SIMPLE_OPS[op]
        stack.popn(pops)
        stack.push(*(UNKNOWN,) * pushes)
    else:
        stack.forget()  # an opcode the simulation does not model: nothing below is known
    if op in _TERMINATORS:
        stack.forget()
    return None


def _call(stack: _Stack, argc: int, names: tuple | None, *, has_caches: bool) -> CallShape:
    items = stack.popn(argc + 2)
    stack.push(UNKNOWN)
    func = _callable_of(items[0], items[1])
    if names is None:
        return CallShape(func, UNKNOWN, UNKNOWN, has_caches)
    positional = Args((UNKNOWN,) * (argc - len(names)))
    return CallShape(func, positional, Kwargs(names), has_caches)


def _analyse(code: CodeType) -> dict[int, _Site]:
    instructions = list(dis.get_instructions(code))
    sites: dict[int, _Site] = {}
    stack, state = _Stack(), {}
    for index, ins in enumerate(instructions):
        if ins.is_jump_target:
            stack.forget()  # two paths merge here: their values may differ
        shape = _step(ins, stack, code, state)
        if shape is None:
            continue
        on_call = shape.has_caches and _PY < (3, 13)  # resting on the CALL: through C
        sites[ins.offset] = _Site(shape, False if on_call else None)
        end = instructions[index + 1].offset if index + 1 < len(instructions) else ins.offset
        direct = _Site(shape, True)  # resting on a cache entry: a Python-to-Python call
        for cache in range(ins.offset + 2, end, 2):
            sites[cache] = direct
    _analyses[id(code)] = (code, sites)
    return sites


# --- reading back from the frame ------------------------------------------------------


_MISSING = object()


def _lookup(ref: Ref, frame: FrameType) -> object:
    name, scope = ref.name, ref.scope
    if scope != "global":
        value = frame.f_locals.get(name, _MISSING)
        if value is not _MISSING or scope == "fast":
            if value is _MISSING:
                raise _Unresolved(name)
            return value
    value = frame.f_globals.get(name, _MISSING)
    if value is _MISSING:
        value = frame.f_builtins.get(name, _MISSING)
        if value is _MISSING:
            raise _Unresolved(name)
    return value


def _getattr(obj: object, name: str) -> object:
    # Never run a property or a module __getattr__ of the user's on the tracer's behalf.
    if isinstance(obj, types.ModuleType):
        value = obj.__dict__.get(name, _MISSING)
        if value is _MISSING:
            raise _Unresolved(name)
        return value
    try:
        if isinstance(inspect.getattr_static(obj, name), property):
            raise _Unresolved(name)
        return getattr(obj, name)
    except AttributeError:
        raise _Unresolved(name) from None


def resolve(value: object, frame: FrameType) -> object:
    """Read a `Ref` or `Method` back from the caller's frame."""
    kind = type(value)
    if kind is Method:
        return _getattr(resolve(value.receiver, frame), value.name)
    if kind is Const:
        return value.value
    if kind is not Ref:
        raise _Unresolved(repr(value))
    obj = _lookup(value, frame)
    for step, key in value.steps:
        if step == "attr":
            obj = _getattr(obj, key)
        elif type(obj) in (dict, list, tuple):
            try:
                obj = obj[key]
            except (KeyError, IndexError, TypeError):
                raise _Unresolved(repr(key)) from None
        else:
            raise _Unresolved(repr(key))
    return obj


@dataclass(frozen=True)
class _Bound:
    """What a callable binds before the call's own arguments: ``self``, partial's args."""

    positional: int
    names: frozenset[str]


_PLAIN = _Bound(0, frozenset())  # a plain function binds nothing ahead
_SELF = _Bound(1, frozenset())  # a bound method, or a class calling __init__, binds self


def _binding(func: object, code: CodeType) -> _Bound | None:
    """What calling `func` binds ahead of the call's arguments, or None when `func` does not
    run `code` itself (a builtin such as ``map`` that calls it later, another function)."""
    if isinstance(func, types.FunctionType):
        return _PLAIN if func.__code__ is code else None
    if isinstance(func, types.MethodType):
        inner = _binding(func.__func__, code)
        return inner and _Bound(inner.positional + 1, inner.names)
    if isinstance(func, functools.partial):
        inner = _binding(func.func, code)
        names = frozenset(func.keywords or ())
        return inner and _Bound(inner.positional + len(func.args), inner.names | names)
    if isinstance(func, type):
        init = getattr(func, "__init__", None)
        return _SELF if getattr(init, "__code__", None) is code else None
    return None


def _is_method(code: CodeType) -> bool:
    return code.co_argcount > 0 and code.co_varnames[0] == "self"


def _count(args: object, frame: FrameType) -> int:
    if isinstance(args, Args):
        total = 0
        for item in args.items:
            total += len(resolve(item.value, frame)) if isinstance(item, Star) else 1
        return total
    try:
        return len(resolve(args, frame))
    except TypeError:
        raise _Unresolved("*args") from None


def _names(kwargs: object, frame: FrameType) -> frozenset[str]:
    parts = kwargs.items if isinstance(kwargs, Kwargs) else (Star(kwargs),)
    names: set[str] = set()
    for part in parts:
        if isinstance(part, Star):
            mapping = resolve(part.value, frame)
            if not isinstance(mapping, Mapping):
                raise _Unresolved("**kwargs")
            names.update(mapping)
        else:
            names.add(part)
    return frozenset(names)


def _bound_ahead(
    shape: CallShape, direct: bool | None, code: CodeType, frame: FrameType
) -> _Bound | None:
    """What the callable bound before the call's own arguments (None: not this callee)."""
    if direct and not _is_method(code):
        return _PLAIN  # a direct call of a plain function binds nothing
    try:
        return _binding(resolve(shape.func, frame), code)
    except _Unresolved:
        if direct is False:
            raise
        # A direct call (or, on 3.13, most likely one): a method loaded from an
        # instance binds it as self.
        return _SELF if _is_method(code) else _PLAIN


def _calls_plainly(site: _Site, code: CodeType, frame: FrameType) -> bool:
    """Whether the call's callable is, right now, the plain function running `code`."""
    obj = _MISSING if site.quick is None else site.quick(frame)
    if obj is _MISSING:
        try:
            obj = resolve(site.shape.func, frame)
        except _Unresolved:
            return False
    return type(obj) is types.FunctionType and obj.__code__ is code


def explicit_arguments(callee: FrameType, parameters: tuple[str, ...]) -> frozenset[str] | None:
    """The names of the parameters the caller of `callee` passed explicitly (by position
    or keyword, ``self`` included for a bound method), or None when it cannot be known.

    `parameters` are the callee's positional parameter names in order (for a ``*args``
    signature, the names its positions stand for).
    """
    caller = callee.f_back
    if caller is None:
        return None
    caller_code = caller.f_code
    cached = _analyses.get(id(caller_code))
    if cached is None or cached[0] is not caller_code:
        cached = (caller_code, _analyse(caller_code))
    site = cached[1].get(caller.f_lasti)
    if site is None:
        return None  # not a call instruction: a property read, an operator, C code
    code = callee.f_code
    known = site.plain.get(id(code))
    if known is not None and (site.direct or _calls_plainly(site, code, caller)):
        return known
    shape = site.shape
    try:
        bound = _bound_ahead(shape, site.direct, code, caller)
        if bound is None:
            return None  # reached through C code that passes its own arguments
        positional = bound.positional + _count(shape.args, caller)
        names = bound.names | _names(shape.kwargs, caller)
    except _Unresolved:
        return None
    explicit = names | frozenset(parameters[:positional])
    if bound is _PLAIN and site.static:
        site.plain[id(code)] = explicit
    return explicit
